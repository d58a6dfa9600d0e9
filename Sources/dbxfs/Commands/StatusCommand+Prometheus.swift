/// `dbxfs status --prometheus [MOUNTPOINT]`: the metrics of each live mount (or the one at
/// MOUNTPOINT) in the Prometheus text format, asked over the control socket, so a cron job can
/// feed node_exporter's textfile collector without opening a port (`--metrics` serves the same
/// over HTTP). Every series gets a `mountpoint` label; families shared by several mounts are
/// printed once (Metrics/PrometheusText.merge).
import Foundation

extension StatusCommand {
    static func printPrometheus(target: (mountpoint: String, socket: String)?) -> Int32 {
        var mounts: [(mountpoint: String, families: [MetricFamilySnapshot])] = []
        if let target {
            do {
                let reply = try ControlClient.request(ControlRequest(command: "metrics"), socket: target.socket, timeout: 10,
                                                      as: MetricsReply.self)
                mounts.append((target.mountpoint, reply.families))
            } catch {
                printError(error.description)
                return error.notMounted ? 3 : 1
            }
        } else {
            var failed = false
            for report in ControlClient.allStatuses() {
                do {
                    let socket = try ControlClient.socket(forPath: report.mountpoint).socket
                    let reply = try ControlClient.request(ControlRequest(command: "metrics"), socket: socket, timeout: 10,
                                                          as: MetricsReply.self)
                    mounts.append((report.mountpoint, reply.families))
                } catch {
                    printError("\(report.mountpoint): \(error.description)")
                    failed = true
                }
            }
            if failed && mounts.isEmpty { return 1 }
        }
        FileHandle.standardOutput.write(Data(PrometheusText.render(PrometheusText.merge(mounts)).utf8))
        return 0
    }
}
