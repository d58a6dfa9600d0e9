/// The mount's metrics registry: counters, histograms with fixed buckets, and gauges read at
/// scrape time, grouped in named families with labels. Kept small on purpose (no client library:
/// the toolchain's modules only). Recording is lock-free (atomic adds), so it can sit on hot paths
/// such as FUSE reads; only finding a labelled child takes a lock, and the hot paths resolve
/// theirs once (MountMetrics, TimedFilesystem). Rendering to text is PrometheusText's job.
import Dispatch
import Synchronization

/// A value that only grows, kept as a whole number of units: `scale` units per counted value,
/// 1 for events and bytes, 1e9 for seconds (nanoseconds: a sum of durations stays an integer add).
final class Counter: Sendable {
    let scale: Double
    private let units = Atomic<UInt64>(0)

    init(scale: Double = 1) { self.scale = scale }

    /// Adds whole units (events, bytes).
    func add(_ amount: UInt64 = 1) { units.wrappingAdd(amount, ordering: .relaxed) }
    /// Adds `amount` in the counted value's own terms (seconds for a seconds counter).
    func add(scaled amount: Double) {
        guard amount > 0, amount.isFinite else { return }
        add(UInt64(min((amount * scale).rounded(), Double(UInt64.max / 2))))
    }
    var value: Double { Double(units.load(ordering: .relaxed)) / scale }
}

/// Observations sorted into fixed buckets (upper bounds, ascending; +Inf is implied), with their
/// count and sum, as Prometheus histograms are.
final class Histogram: Sendable {
    let upperBounds: [Double]
    /// One per bound plus one for +Inf; each counts the observations that fell in it alone.
    private let buckets: [Counter]
    private let total: Counter

    init(upperBounds: [Double], scale: Double = 1e9) {
        precondition(!upperBounds.isEmpty && zip(upperBounds, upperBounds.dropFirst()).allSatisfy { $0 < $1 },
                     "histogram bounds must be ascending")
        self.upperBounds = upperBounds
        buckets = (0...upperBounds.count).map { _ in Counter() }
        total = Counter(scale: scale)
    }

    func observe(_ value: Double) {
        var index = 0
        while index < upperBounds.count && value > upperBounds[index] { index += 1 }
        buckets[index].add()
        total.add(scaled: value)
    }

    /// Seconds since `start` (`DispatchTime.now().uptimeNanoseconds`), observed.
    func observe(sinceUptimeNanoseconds start: UInt64) {
        observe(Double(DispatchTime.now().uptimeNanoseconds &- start) / 1e9)
    }

    /// Cumulative counts per bound (the last is +Inf, which is also the count), and the sum.
    var snapshot: (cumulative: [UInt64], sum: Double) {
        var running: UInt64 = 0
        let cumulative = buckets.map { bucket -> UInt64 in
            running += UInt64(bucket.value)
            return running
        }
        return (cumulative, total.value)
    }
}

enum MetricType: String, Codable, Sendable { case counter, gauge, histogram }

struct MetricLabel: Codable, Sendable, Equatable {
    var name: String
    var value: String
}

/// One line of the exposition: a sample name (the family's, or with a suffix such as `_bucket`),
/// its labels, and the value.
struct MetricSample: Codable, Sendable, Equatable {
    var name: String
    var labels: [MetricLabel]
    var value: Double

    init(name: String, labels: [(String, String)], value: Double) {
        self.name = name
        self.labels = labels.map { MetricLabel(name: $0.0, value: $0.1) }
        self.value = value
    }
}

/// What one family holds at scrape time (also sent as JSON over the control socket, for
/// `dbxfs status --prometheus`).
struct MetricFamilySnapshot: Codable, Sendable, Equatable {
    var name: String
    var help: String
    var type: MetricType
    var samples: [MetricSample]
}

protocol MetricFamily: Sendable {
    var name: String { get }
    func collect() -> MetricFamilySnapshot
}

/// A family of counters or histograms, one child per combination of label values, made on first
/// use. Label values must come from a bounded set (routes, operations, outcomes; never paths).
final class LabelledFamily<Child: Sendable>: MetricFamily, Sendable {
    let name: String
    let help: String
    let labelNames: [String]
    private let make: @Sendable () -> Child
    private let render: @Sendable (_ name: String, _ labels: [(String, String)], Child) -> [MetricSample]
    private let type: MetricType
    private let children = Mutex<[[String]: Child]>([:])

    fileprivate init(name: String, help: String, type: MetricType, labelNames: [String], make: @escaping @Sendable () -> Child,
                     render: @escaping @Sendable (String, [(String, String)], Child) -> [MetricSample]) {
        self.name = name; self.help = help; self.type = type; self.labelNames = labelNames
        self.make = make; self.render = render
    }

    /// The child for these label values (in `labelNames` order).
    func labels(_ values: String...) -> Child { child(values) }

    func child(_ values: [String]) -> Child {
        precondition(values.count == labelNames.count, "\(name): \(labelNames.count) label values expected")
        return children.withLock { children in
            if let existing = children[values] { return existing }
            let made = make()
            children[values] = made
            return made
        }
    }

    func collect() -> MetricFamilySnapshot {
        let all = children.withLock { $0 }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        let samples = all.flatMap { values, child in render(name, Array(zip(labelNames, values)), child) }
        return MetricFamilySnapshot(name: name, help: help, type: type, samples: samples)
    }
}

/// A gauge family whose values are read when scraped (queue depth, cache use, lag), so nothing
/// has to keep them current meanwhile. The closure returns label values (in `labelNames` order)
/// and a value per series; it runs on the scraping thread and must not block for long.
final class GaugeFamily: MetricFamily, Sendable {
    let name: String
    let help: String
    let labelNames: [String]
    private let read: @Sendable () -> [(labels: [String], value: Double)]

    init(name: String, help: String, labelNames: [String] = [], read: @escaping @Sendable () -> [(labels: [String], value: Double)]) {
        self.name = name; self.help = help; self.labelNames = labelNames; self.read = read
    }

    func collect() -> MetricFamilySnapshot {
        let samples = read().map { MetricSample(name: name, labels: Array(zip(labelNames, $0.labels)), value: $0.value) }
        return MetricFamilySnapshot(name: name, help: help, type: .gauge, samples: samples)
    }
}

/// Every family of one mount, in registration order (the order of the exposition).
final class MetricsRegistry: Sendable {
    private let families = Mutex<[any MetricFamily]>([])

    /// A counter family; counters' names end in `_total` (seconds counters in `_seconds_total`).
    func counters(_ name: String, help: String, labels: [String] = [], scale: Double = 1) -> LabelledFamily<Counter> {
        precondition(name.hasSuffix("_total"), "a counter's name ends in _total: \(name)")
        return add(LabelledFamily(name: name, help: help, type: .counter, labelNames: labels, make: { Counter(scale: scale) },
                                  render: { name, labels, counter in [MetricSample(name: name, labels: labels, value: counter.value)] }))
    }

    /// A counter without labels.
    func counter(_ name: String, help: String, scale: Double = 1) -> Counter {
        counters(name, help: help, scale: scale).labels()
    }

    func histograms(_ name: String, help: String, labels: [String] = [], upperBounds: [Double]) -> LabelledFamily<Histogram> {
        add(LabelledFamily(name: name, help: help, type: .histogram, labelNames: labels,
                           make: { Histogram(upperBounds: upperBounds) }, render: Self.histogramSamples))
    }

    func gauges(_ name: String, help: String, labels: [String] = [],
                read: @escaping @Sendable () -> [(labels: [String], value: Double)]) {
        _ = add(GaugeFamily(name: name, help: help, labelNames: labels, read: read))
    }

    /// A gauge without labels; `read` returning nil leaves it out of the scrape (unknown).
    func gauge(_ name: String, help: String, read: @escaping @Sendable () -> Double?) {
        gauges(name, help: help) { read().map { [(labels: [], value: $0)] } ?? [] }
    }

    private func add<Family: MetricFamily>(_ family: Family) -> Family {
        families.withLock { families in
            precondition(!families.contains { $0.name == family.name }, "metric \(family.name) registered twice")
            families.append(family)
        }
        return family
    }

    func collect() -> [MetricFamilySnapshot] {
        families.withLock { $0 }.map { $0.collect() }
    }

    private static func histogramSamples(_ name: String, _ labels: [(String, String)], _ histogram: Histogram) -> [MetricSample] {
        // `le` goes last, as client libraries print it.
        let (cumulative, sum) = histogram.snapshot
        var samples: [MetricSample] = []
        for (index, count) in cumulative.enumerated() {
            let bound = index < histogram.upperBounds.count ? PrometheusText.number(histogram.upperBounds[index]) : "+Inf"
            samples.append(MetricSample(name: name + "_bucket", labels: labels + [("le", bound)], value: Double(count)))
        }
        samples.append(MetricSample(name: name + "_sum", labels: labels, value: sum))
        samples.append(MetricSample(name: name + "_count", labels: labels, value: Double(cumulative.last ?? 0)))
        return samples
    }
}
