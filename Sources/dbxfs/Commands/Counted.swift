/// "1 file", "3 files": counts in messages for people, in the right number (never "file(s)").
func counted(_ n: Int, _ one: String, _ many: String) -> String { "\(n) \(n == 1 ? one : many)" }
