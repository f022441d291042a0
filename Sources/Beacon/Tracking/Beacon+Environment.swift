import BeaconHTTP
import Foundation

extension Beacon.Configuration {
    /// Why ``fromEnvironment(_:)`` could not build a configuration: which variable, what is wrong
    /// with it and what it should hold. Header values are never part of the message.
    public struct EnvironmentError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The environment variable at fault, `BEACON_URL` say.
        public var variable: String
        /// A sentence for people: what is wrong and what to set instead.
        public var message: String

        /// An error about `variable`, explained by `message`.
        public init(variable: String, message: String) {
            self.variable = variable
            self.message = message
        }

        public var description: String { "environment error (\(variable)): \(message)" }
    }

    /// A configuration from environment variables, for services configured by their deployment
    /// (opt-in: nothing else reads the environment):
    ///
    /// - `BEACON_DIRECTORY` (required): the log directory.
    /// - `BEACON_URL`: the collector (`http://` or `https://`); unset or empty keeps events on disk.
    /// - `BEACON_HEADERS`: headers sent with every upload, as `Name=value` pairs separated by
    ///   commas, values percent-decoded (the OpenTelemetry `OTEL_EXPORTER_OTLP_HEADERS` format):
    ///   `Authorization=Bearer%20abc,X-Tenant=shop`. Needs `BEACON_URL`.
    /// - `BEACON_DIRECTORY_SHARING`: `group` for a log directory shared with a group on purpose
    ///   (its group may write it, another user may own it: `storage.sharing = .group`); unset or
    ///   `owner` keeps the default, a directory of this user's alone.
    ///
    /// Everything else keeps its default; change the result as any configuration.
    ///
    /// ```swift
    /// var config = try Beacon.Configuration.fromEnvironment()
    /// config.appVersion = "2.3.1"
    /// let beacon = try Beacon(configuration: config)
    /// ```
    /// - Parameter environment: the variables; default the process's.
    /// - Throws: ``EnvironmentError`` naming the variable that is missing or malformed.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Beacon.Configuration {
        guard let directory = environment["BEACON_DIRECTORY"], !directory.isEmpty else {
            throw EnvironmentError(variable: "BEACON_DIRECTORY", message: "not set: set it to the directory of the event log, for example /var/lib/app/beacon")
        }
        var config = Beacon.Configuration(directory: directory)
        switch environment["BEACON_DIRECTORY_SHARING"] ?? "" {
        case "", "owner": break
        case "group": config.storage.sharing = .group
        case let other:
            throw EnvironmentError(variable: "BEACON_DIRECTORY_SHARING", message: "\"\(other)\" is not owner or group: use group for a log directory its group may write, or unset it")
        }
        let headers = try parseHeaders(environment["BEACON_HEADERS"] ?? "")
        guard let text = environment["BEACON_URL"], !text.isEmpty else {
            if !headers.isEmpty {
                throw EnvironmentError(variable: "BEACON_HEADERS", message: "set, but BEACON_URL is not: headers are sent only with uploads to a collector; set BEACON_URL or unset BEACON_HEADERS")
            }
            return config
        }
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty else {
            throw EnvironmentError(variable: "BEACON_URL", message: "\"\(RedactedURL.redact(text))\" is not an http:// or https:// URL with a host, such as http://collector.internal:8080/events")
        }
        var delivery = DeliveryConfiguration(url: url)
        delivery.headers = headers
        config.delivery = delivery
        return config
    }

    /// `Name=value,Name2=value2` (values percent-decoded) as headers.
    static func parseHeaders(_ text: String) throws -> HTTPHeaders {
        var headers = HTTPHeaders()
        for (index, pair) in text.split(separator: ",", omittingEmptySubsequences: false).enumerated() {
            let item = pair.trimmingCharacters(in: .whitespaces)
            if item.isEmpty {
                if text.trimmingCharacters(in: .whitespaces).isEmpty { break }
                throw EnvironmentError(variable: "BEACON_HEADERS", message: "pair \(index + 1) is empty; write Name=value pairs separated by single commas")
            }
            guard let equals = item.firstIndex(of: "=") else {
                throw EnvironmentError(variable: "BEACON_HEADERS", message: "pair \(index + 1) has no '=': write Name=value pairs separated by commas, such as Authorization=Bearer%20abc")
            }
            let name = item[..<equals].trimmingCharacters(in: .whitespaces)
            let raw = item[item.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty, name.utf8.allSatisfy(isTokenByte) else {
                throw EnvironmentError(variable: "BEACON_HEADERS", message: "pair \(index + 1): \"\(name)\" is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)")
            }
            // The value may be a secret: the messages name the header, never its value.
            guard let value = raw.removingPercentEncoding else {
                throw EnvironmentError(variable: "BEACON_HEADERS", message: "the value of \(name) has a malformed percent escape (write %20 for a space, %2C for a comma)")
            }
            guard !value.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" || $0.value == 0x7F }) else {
                throw EnvironmentError(variable: "BEACON_HEADERS", message: "the value of \(name) holds a control character (a line break?); header values are one line")
            }
            guard !headers.contains(name) else {
                throw EnvironmentError(variable: "BEACON_HEADERS", message: "\(name) is given twice")
            }
            headers.add(name: name, value: value)
        }
        return headers
    }

    /// RFC 9110 `tchar`.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
