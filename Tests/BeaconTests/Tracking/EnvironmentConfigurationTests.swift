import Foundation
import Testing
@testable import Beacon

/// `Beacon.Configuration.fromEnvironment`: directory, collector URL and headers from the
/// environment, with errors that name the variable and never print a header's value.
@Suite struct EnvironmentConfigurationTests {
    @Test func directoryAlone() throws {
        let config = try Beacon.Configuration.fromEnvironment(["BEACON_DIRECTORY": "/var/lib/app/beacon", "PATH": "/bin"])
        #expect(config.directory == "/var/lib/app/beacon")
        #expect(config.delivery == nil)
        #expect(config.backpressure == .dropNewest)
    }

    @Test func urlAndHeaders() throws {
        let config = try Beacon.Configuration.fromEnvironment([
            "BEACON_DIRECTORY": "/d",
            "BEACON_URL": "https://collector.example:8443/v1/events",
            "BEACON_HEADERS": "Authorization=Bearer%20s3cret , X-Tenant=shop,X-Empty=",
        ])
        #expect(config.delivery?.url == URL(string: "https://collector.example:8443/v1/events"))
        #expect(config.delivery?.headers == ["Authorization": "Bearer s3cret", "X-Tenant": "shop", "X-Empty": ""])
    }

    @Test func anEmptyURLKeepsEventsOnDisk() throws {
        let config = try Beacon.Configuration.fromEnvironment(["BEACON_DIRECTORY": "/d", "BEACON_URL": "", "BEACON_HEADERS": ""])
        #expect(config.delivery == nil)
    }

    static let refused: [(environment: [String: String], variable: String, says: String)] = [
        ([:], "BEACON_DIRECTORY", "not set"),
        (["BEACON_DIRECTORY": ""], "BEACON_DIRECTORY", "not set"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "collector:8080"], "BEACON_URL", "not an http:// or https:// URL"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "ftp://host/x"], "BEACON_URL", "not an http:// or https:// URL"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "http:///path"], "BEACON_URL", "with a host"),
        (["BEACON_DIRECTORY": "/d", "BEACON_HEADERS": "A=b"], "BEACON_HEADERS", "BEACON_URL is not"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "http://h/", "BEACON_HEADERS": "Authorization: Bearer s3cret"], "BEACON_HEADERS", "has no '='"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "http://h/", "BEACON_HEADERS": "A=1,,B=2"], "BEACON_HEADERS", "pair 2 is empty"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "http://h/", "BEACON_HEADERS": "Bad Name=s3cret"], "BEACON_HEADERS", "not a header name"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "http://h/", "BEACON_HEADERS": "Token=s3cret%zz"], "BEACON_HEADERS", "malformed percent escape"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "http://h/", "BEACON_HEADERS": "Token=s3cret%0Ax"], "BEACON_HEADERS", "control character"),
        (["BEACON_DIRECTORY": "/d", "BEACON_URL": "http://h/", "BEACON_HEADERS": "Token=s3cret,Token=s3cret"], "BEACON_HEADERS", "given twice"),
    ]

    @Test(arguments: refused.indices)
    func malformedVariablesAreNamed(_ index: Int) throws {
        let (environment, variable, says) = Self.refused[index]
        let error = try #require(throws: Beacon.Configuration.EnvironmentError.self) {
            try Beacon.Configuration.fromEnvironment(environment)
        }
        #expect(error.variable == variable)
        #expect(error.description.hasPrefix("environment error (\(variable)): "))
        #expect(error.message.contains(says), "\(error)")
        #expect(!error.description.contains("s3cret"), "a header value reached the message: \(error)")
    }

    @Test func aURLWithCredentialsIsRedactedInTheError() throws {
        let error = try #require(throws: Beacon.Configuration.EnvironmentError.self) {
            try Beacon.Configuration.fromEnvironment(["BEACON_DIRECTORY": "/d", "BEACON_URL": "ftp://user:s3cret@host/?password=s3cret"])
        }
        #expect(!error.description.contains("s3cret"), "\(error)")
    }
}
