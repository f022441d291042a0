@testable import BeaconHTTP
import BeaconTestSupport
import BeaconTesting
import Foundation
import Testing
@testable import Beacon

/// `HTTPHeaders`: the one header type of requests, answers, configuration and recorded requests.
/// Repeated fields are kept in order; names compare without ASCII case; values never print.
@Suite struct HTTPHeadersTests {
    @Test func repeatedFieldsAreKeptInOrderAndLookedUpInAnyCase() {
        var headers: HTTPHeaders = [("Link", "</a>"), ("X-Tenant", "shop"), ("link", "</b>")]
        #expect(headers.count == 3)
        #expect(headers["LINK"] == "</a>", "the first value")
        #expect(headers.values(for: "Link") == ["</a>", "</b>"])
        #expect(headers.contains("x-tenant") && !headers.contains("X-Tenan"))
        headers.add(name: "LINK", value: "</c>")
        #expect(headers.values(for: "link") == ["</a>", "</b>", "</c>"])
        #expect(headers.map(\.name) == ["Link", "X-Tenant", "link", "LINK"], "names keep their spelling")
    }

    /// Setting through the subscript replaces every field of that name, in the place of the first,
    /// for every position of the first and every count of repeats; nil removes them all.
    @Test(arguments: 0...3, 0...3)
    func settingReplacesEveryFieldOfTheName(before: Int, repeats: Int) {
        var fields: [(name: String, value: String)] = (0..<before).map { ("A\($0)", "a") }
        for r in 0..<repeats { fields.append((r % 2 == 0 ? "Key" : "KEY", "old\(r)")); fields.append(("B\(r)", "b")) }
        var headers = HTTPHeaders(fields)
        headers["key"] = "new"
        #expect(headers.values(for: "Key") == ["new"])
        #expect(headers.firstIndex { $0.name.lowercased() == "key" } == (repeats == 0 ? headers.count - 1 : before))
        #expect(headers.count == before + repeats + 1, "the B fields and one Key")
        headers["KEY"] = nil
        #expect(!headers.contains("key") && headers.count == before + repeats)
    }

    @Test func literalsKeepTheOrderWrittenAndEqualityIsInOrder() {
        let a: HTTPHeaders = ["A": "1", "B": "2"]
        let b: HTTPHeaders = [("A", "1"), ("B", "2")]
        #expect(a == b)
        #expect(a != ["B": "2", "A": "1"])
        #expect(HTTPHeaders().isEmpty)
    }

    @Test func descriptionNamesFieldsWithoutTheirValues() {
        let headers: HTTPHeaders = ["Authorization": "Bearer s3cret-token", "X-Tenant": "shop"]
        #expect("\(headers)" == "[Authorization, X-Tenant]")
        #expect(!"\(headers)".contains("s3cret"))
    }

    /// Configured fields go out in their order, a repeated one twice, after Beacon's own; the
    /// loopback collector records them as sent.
    @Test func configuredRepeatedFieldsAreSentAsConfigured() async throws {
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        try await withTrackerDirectory { dir in
            var config = Beacon.Configuration(directory: dir, serverURL: collector.url)
            config.delivery?.headers = [("X-Tag", "one"), ("Authorization", "Bearer t"), ("x-tag", "two")]
            config.lifecycleEvents = false
            config.diagnostics = { _ in }
            let beacon = try Beacon(configuration: config)
            beacon.track("e")
            let report = await beacon.shutdown(timeout: .seconds(60))
            #expect(report.remaining == 0, "\(report)")
        }
        let request = try #require(collector.requests.first)
        #expect(request.headers.values(for: "X-Tag") == ["one", "two"])
        #expect(request.headers["authorization"] == "Bearer t")
        let names = request.headers.map { $0.name.lowercased() }
        #expect(names.firstIndex(of: "x-tag")! > names.firstIndex(of: "content-type")!, "after Beacon's own fields")
    }
}
