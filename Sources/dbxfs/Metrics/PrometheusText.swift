/// The Prometheus text exposition format (version 0.0.4), as the `/metrics` endpoint and
/// `dbxfs status --prometheus` print it: for each family a `# HELP` and a `# TYPE` line, then
/// one line per sample, `name{label="value",...} value`. Escaping follows the format's rules
/// (backslash and newline in help; backslash, double quote and newline in label values).
/// A label whose value is empty is left out, which Prometheus reads as the same series.
/// Reference: https://prometheus.io/docs/instrumenting/exposition_formats/
import Foundation

enum PrometheusText {
    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    static func render(_ families: [MetricFamilySnapshot]) -> String {
        var text = ""
        for family in families {
            text += "# HELP \(family.name) \(escapeHelp(family.help))\n"
            text += "# TYPE \(family.name) \(family.type.rawValue)\n"
            for sample in family.samples {
                text += sample.name
                let labels = sample.labels.filter { !$0.value.isEmpty }
                if !labels.isEmpty {
                    text += "{" + labels.map { "\($0.name)=\"\(escapeLabelValue($0.value))\"" }.joined(separator: ",") + "}"
                }
                text += " " + number(sample.value) + "\n"
            }
        }
        return text
    }

    /// Integers without a fraction, "+Inf", "-Inf", "NaN", otherwise Swift's shortest form
    /// ("0.25", "1e-05"), all of which the format's float syntax accepts.
    /// The families of several mounts as one exposition: each family once, its samples from
    /// every mount, told apart by a `mountpoint` label put first (`dbxfs status --prometheus`).
    static func merge(_ mounts: [(mountpoint: String, families: [MetricFamilySnapshot])]) -> [MetricFamilySnapshot] {
        var merged: [MetricFamilySnapshot] = []
        var position: [String: Int] = [:]
        for (mountpoint, families) in mounts {
            for family in families {
                let samples = family.samples.map { sample -> MetricSample in
                    var labelled = sample
                    labelled.labels.insert(MetricLabel(name: "mountpoint", value: mountpoint), at: 0)
                    return labelled
                }
                if let index = position[family.name] {
                    merged[index].samples += samples
                } else {
                    position[family.name] = merged.count
                    merged.append(MetricFamilySnapshot(name: family.name, help: family.help, type: family.type, samples: samples))
                }
            }
        }
        return merged
    }

    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    static func escapeHelp(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func escapeLabelValue(_ text: String) -> String {
        escapeHelp(text).replacingOccurrences(of: "\"", with: "\\\"")
    }
}
