/// `dbxfs status --prometheus [MOUNTPOINT]`: the metrics of each live mount (or the one at
/// MOUNTPOINT) in the Prometheus text format, asked over the control socket, so a cron job can
/// feed node_exporter's textfile collector without opening a port (`--metrics` serves the same
/// over HTTP). Every series gets a `mountpoint` label; families shared by several mounts are
/// printed once (Metrics/PrometheusText.merge).
import Foundation

extension StatusCommand {
    static func printPrometheus(target: (mountpoint: String, socket: String)?) -> Int32 {
        var replies: [MetricsReply] = []
        let request = ControlRequest(command: "metrics")
        if let target {
            do {
                replies.append(try ControlClient.request(request, socket: target.socket, timeout: 10, as: MetricsReply.self))
            } catch {
                printError(error.description)
                return error.notMounted ? 3 : 1
            }
        } else {
            // Every socket, as `status` asks them: daemons lazily unmounted or still draining too.
            var failed = false
            for socket in ControlPaths.allSockets() {
                do {
                    replies.append(try ControlClient.request(request, socket: socket, timeout: 10, as: MetricsReply.self))
                } catch where error.notMounted {
                    continue   // its daemon is gone (`status` removes such sockets)
                } catch {
                    printError(error.untrusted ? "skipped: \(error.description)" : error.description)
                    failed = true
                }
            }
            if failed && replies.isEmpty { return 1 }
        }
        // Two daemons at one mountpoint (one lazily unmounted, or draining, and its successor)
        // must not give two series the same labels: the later ones are told apart by pid.
        var seen = Set<String>()
        let mounts = replies.sorted { $0.mountpoint < $1.mountpoint }.map { reply in
            let label = seen.insert(reply.mountpoint).inserted ? reply.mountpoint : "\(reply.mountpoint) (pid \(reply.pid ?? 0))"
            return (mountpoint: label, families: reply.families)
        }
        writeOutput(PrometheusText.render(PrometheusText.merge(mounts)))
        return 0
    }
}
