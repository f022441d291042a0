import Beacon
import Logging
import ServiceLifecycle

// The README's snippets for services ("Running in a service"), compiled here.

/// Beacon as a service of a swift-service-lifecycle `ServiceGroup`. A group stops its services
/// with graceful shutdown, not cancellation; `cancelWhenGracefulShutdown` turns the one into the
/// other, and Beacon's `run()` then delivers what is pending within `shutdownGrace` and returns.
struct BeaconService: Service {
    let beacon: Beacon
    func run() async { await cancelWhenGracefulShutdown { await beacon.run() } }
}
// ServiceGroup(services: [BeaconService(beacon: beacon), httpServer], gracefulShutdownSignals: [.sigterm], logger: logger)

enum BeaconLogging {
    /// A bridge from Beacon's diagnostics to swift-log. Beacon rate-limits them at the source
    /// (the same diagnostic at most once per `diagnosticsInterval`, 10 s), so a stalled disk
    /// dropping thousands of events makes one error, then one per interval with the count; a state
    /// change (delivery paused/resumed, writer stalled/recovered, quota 80/100 %) is one line each.
    static func diagnostics(to logger: Logger) -> @Sendable (BeaconDiagnostic) -> Void {
        { diagnostic in
            // Severity names are swift-log's levels: paused, stalled and the quota at 80 % are
            // warnings, resumed and recovered notices, losses errors.
            logger.log(level: Logger.Level(rawValue: diagnostic.severity.rawValue) ?? .warning, "\(diagnostic.message)", metadata: [
                "beacon.kind": "\(diagnostic.kind)",
                "beacon.subject": "\(diagnostic.subject ?? "")",
                "beacon.suppressed": "\(diagnostic.suppressed)",
            ])
        }
    }
}
