// The README's snippets that need swift-log, compiled (never run: they write to /var/lib). Keep
// them identical to the README (ReadmeSnippetTests checks the blocks marked service-example;
// the others are compiled by the root package's Tests/ReadmeSnippets): `Tests/ServiceExample/test.sh`
// builds this package.
import Beacon
import Foundation
import Logging

enum ReadmeSnippets {
    /// "Diagnostics are rate-limited at the source": the swift-log bridge.
    static func swiftLogBridge(_ config: inout Beacon.Configuration) {
      let logger = Logger(label: "beacon")
      config.diagnostics = { diagnostic in
          logger.log(level: Logger.Level(rawValue: diagnostic.severity.rawValue) ?? .warning, "\(diagnostic.message)", metadata: [
              "beacon.kind": "\(diagnostic.kind)", "beacon.subject": "\(diagnostic.subject ?? "")",
              "beacon.suppressed": "\(diagnostic.suppressed)",
          ])
      }
    }

    /// "Configuration from the environment".
    static func environment() throws -> Beacon {
        var config = try Beacon.Configuration.fromEnvironment()
        config.appVersion = "2.3.1"
        return try Beacon(configuration: config)
    }
}
