/// The metrics registry and its text rendering (Sources/dbxfs/Metrics): counters and histograms
/// keep exact counts under concurrent adds, histograms are cumulative with +Inf as the count, the
/// text follows the exposition format's escaping, several mounts merge into one exposition, and
/// `--metrics` addresses parse and tell loopback apart. (The mount tests parse real scrapes with
/// prometheus_client: Tests/cli/test_metrics.py.)
import Foundation
import Testing
@testable import dbxfs

struct MetricsRegistryTests {
    @Test func countersAddUnitsAndSeconds() {
        let count = Counter()
        count.add()
        count.add(41)
        #expect(count.value == 42)
        let seconds = Counter(scale: 1e9)
        seconds.add(scaled: 1.5)
        seconds.add(scaled: 0.25)
        seconds.add(scaled: -3)   // ignored: counters only grow
        #expect(abs(seconds.value - 1.75) < 1e-9)
    }

    @Test func concurrentAddsAreAllCounted() {
        let counter = Counter()
        let histogram = Histogram(upperBounds: [0.5])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<10_000 {
                counter.add()
                histogram.observe(0.25)
            }
        }
        #expect(counter.value == 80_000)
        #expect(histogram.snapshot.cumulative == [80_000, 80_000])
    }

    @Test func histogramBucketsAreCumulative() {
        let histogram = Histogram(upperBounds: [0.01, 1])
        for value in [0.001, 0.01, 0.5, 100] { histogram.observe(value) }
        let (cumulative, sum) = histogram.snapshot
        #expect(cumulative == [2, 3, 4])   // le=0.01 includes its bound; +Inf is the count
        #expect(abs(sum - 100.511) < 1e-6)
    }

    @Test func theExpositionText() {
        let registry = MetricsRegistry()
        let requests = registry.counters("demo_requests_total", help: "Requests.\nSecond line \\ here.", labels: ["route", "tag"])
        requests.labels("files/download", "").add(3)
        requests.labels("a\"b\\c\nd", "path/not_found").add()
        let latency = registry.histograms("demo_duration_seconds", help: "Latency.", labels: ["op"], upperBounds: [0.1, 1])
        latency.labels("read").observe(0.05)
        latency.labels("read").observe(2)
        registry.gauge("demo_lag_seconds", help: "Known.") { 1.5 }
        registry.gauge("demo_unknown", help: "Unknown: no sample.") { nil }
        let text = PrometheusText.render(registry.collect())
        #expect(text == """
            # HELP demo_requests_total Requests.\\nSecond line \\\\ here.
            # TYPE demo_requests_total counter
            demo_requests_total{route="a\\"b\\\\c\\nd",tag="path/not_found"} 1
            demo_requests_total{route="files/download"} 3
            # HELP demo_duration_seconds Latency.
            # TYPE demo_duration_seconds histogram
            demo_duration_seconds_bucket{op="read",le="0.1"} 1
            demo_duration_seconds_bucket{op="read",le="1"} 1
            demo_duration_seconds_bucket{op="read",le="+Inf"} 2
            demo_duration_seconds_sum{op="read"} 2.05
            demo_duration_seconds_count{op="read"} 2
            # HELP demo_lag_seconds Known.
            # TYPE demo_lag_seconds gauge
            demo_lag_seconds 1.5
            # HELP demo_unknown Unknown: no sample.
            # TYPE demo_unknown gauge

            """)
    }

    @Test func numbers() {
        #expect(PrometheusText.number(3) == "3")
        #expect(PrometheusText.number(0.25) == "0.25")
        #expect(PrometheusText.number(1e-5) == "1e-05")
        #expect(PrometheusText.number(.infinity) == "+Inf")
        #expect(PrometheusText.number(.nan) == "NaN")
    }

    @Test func severalMountsMergeIntoOneExposition() {
        func family(_ value: Double) -> MetricFamilySnapshot {
            MetricFamilySnapshot(name: "x_total", help: "X.", type: .counter,
                                 samples: [MetricSample(name: "x_total", labels: [("k", "v")], value: value)])
        }
        let text = PrometheusText.render(PrometheusText.merge([("/mnt/a", [family(1)]), ("/mnt/b", [family(2)])]))
        #expect(text == """
            # HELP x_total X.
            # TYPE x_total counter
            x_total{mountpoint="/mnt/a",k="v"} 1
            x_total{mountpoint="/mnt/b",k="v"} 2

            """)
    }

    @Test func theMountsMetricsRenderEveryFamilyOnce() {
        let metrics = MountMetrics()
        metrics.addGauges(MountMetrics.Sources(connectionState: { "offline" }))
        metrics.recordOperation(.read, sinceUptimeNanoseconds: DispatchTime.now().uptimeNanoseconds, failed: true)
        let text = metrics.render()
        let types = text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }
        #expect(Set(types).count == types.count)
        #expect(text.contains("dbxfs_fuse_operation_errors_total{operation=\"read\"} 1\n"))
        #expect(text.contains("dbxfs_fuse_operation_duration_seconds_count{operation=\"read\"} 1\n"))
        #expect(text.contains("dbxfs_connection_state{state=\"offline\"} 1\n"))
        #expect(text.contains("dbxfs_connection_state{state=\"online\"} 0\n"))
    }
}

struct MetricsAddressTests {
    @Test func addressesThatParse() throws {
        #expect(try MetricsAddress.parse("9101") == MetricsAddress(host: "127.0.0.1", port: 9101, isIPv6: false))
        #expect(try MetricsAddress.parse("localhost:9101").description == "127.0.0.1:9101")
        #expect(try MetricsAddress.parse("127.0.0.2:0").isLoopback)
        #expect(try MetricsAddress.parse("[::1]:9101") == MetricsAddress(host: "::1", port: 9101, isIPv6: true))
        #expect(try MetricsAddress.parse("[::1]:9101").isLoopback)
        #expect(try !MetricsAddress.parse("0.0.0.0:9101").isLoopback)
        #expect(try !MetricsAddress.parse("[::]:9101").isLoopback)
        #expect(try !MetricsAddress.parse("10.1.2.3:80").isLoopback)
    }

    @Test func addressesThatDoNot() {
        for bad in ["", ":", "host:80", "127.0.0.1:65536", "127.0.0.1:-1", "[::1]9101", "[::1", "1.2.3:80", "127.0.0.1:http"] {
            #expect(throws: MetricsAddress.Invalid.self, "\(bad)") { try MetricsAddress.parse(bad) }
        }
    }

    @Test func nonLoopbackNeedsTheFlag() throws {
        #expect(throws: MountOptions.UsageError.self) {
            try MountOptions.parse(["--metrics", "0.0.0.0:9101", "/mnt"], environment: [:])
        }
        let allowed = try MountOptions.parse(["--metrics", "0.0.0.0:9101", "--metrics-allow-remote", "/mnt"], environment: [:])
        #expect(allowed.metricsAddress?.port == 9101 && allowed.metricsAllowRemote)
        #expect(throws: MountOptions.UsageError.self) {
            try MountOptions.parse(["--metrics-allow-remote=maybe", "/mnt"], environment: [:])
        }
    }
}
