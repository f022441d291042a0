/// `Duration` in the units the system calls take, in one place for every module of the package.
extension Duration {
    /// The duration in seconds, as the `TimeInterval` Foundation takes.
    package var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// The duration in whole nanoseconds, truncated toward zero; saturates at `Int64.min` and
    /// `Int64.max` (about 292 years) instead of overflowing.
    package var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflowSum) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflowSum { return seconds < 0 ? .min : .max }
        return sum
    }
}
