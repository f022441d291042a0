// swift-tools-version:6.0
//
// Beacon: durable, ordered analytics events for Swift services on Linux.
// Zero package dependencies: only the Swift toolchain (stdlib, Foundation, Dispatch,
// Synchronization, Glibc), the system zlib and the system OpenSSL.
import PackageDescription

let package = Package(
    name: "Beacon",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "BeaconLog", targets: ["BeaconLog"]),
        .library(name: "Beacon", targets: ["Beacon"]),
        .library(name: "BeaconURLSession", targets: ["BeaconURLSession"]),
        .library(name: "BeaconTesting", targets: ["BeaconTesting"]),
        .executable(name: "beacon", targets: ["BeaconCLI"]),
        .executable(name: "beacon-bench", targets: ["BeaconBenchmarks"]),
        .executable(name: "beacon-delay-proxy", targets: ["beacon-delay-proxy"]),
    ],
    targets: [
        // The pipeline an event goes through, and where each stage lives:
        //
        //   track ──▶ hand-off ──▶ log ──▶ uploader ──▶ client ──▶ collector
        //
        //   track, hand-off   Beacon: Sources/Beacon/Tracking/, Handoff/
        //   log               BeaconLog (with CBeaconCRC and CBeaconFileCalls)
        //   uploader          Beacon: Sources/Beacon/Delivery/ (the `Transport` protocol, SocketTransport)
        //   client            BeaconHTTP, and BeaconTLS for https://
        //
        // BeaconLog knows nothing of HTTP, BeaconHTTP nothing of the log or the tracker. Only
        // BeaconTLS links OpenSSL, so the loopback collector (BeaconHTTPServer) links neither it
        // nor the tracker.
        //
        // CRC-32C with the CPU's instruction (SSE4.2 / AArch64 CRC); BeaconLog falls back to Swift.
        .target(name: "CBeaconCRC"),
        // The file system calls Swift's Glibc module does not import: fallocate, sync_file_range, statx.
        .target(name: "CBeaconFileCalls"),
        .target(name: "BeaconLog", dependencies: ["CBeaconCRC", "CBeaconFileCalls"]),
        .systemLibrary(name: "CZlib", path: "Sources/CZlib"),
        // The system's OpenSSL 3 (libssl-dev) for BeaconTLS.
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL"),
        // The HTTP/1.1 client: request heads, the answer parser, header fields, HTTP dates, gzip,
        // sockets, name lookup, proxies, pipelined answers; TLS only through a seam BeaconTLS fills.
        .target(name: "BeaconHTTP", dependencies: ["CZlib"]),
        // TLS over BeaconHTTP's sockets with the system's OpenSSL: the one target that links it.
        .target(name: "BeaconTLS", dependencies: ["BeaconHTTP", "COpenSSL"]),
        .target(name: "Beacon", dependencies: ["BeaconLog", "BeaconHTTP", "BeaconTLS"]),
        // HTTPTransport (URLSession) in its own module: only a program that imports it maps
        // FoundationNetworking and libcurl (about 2 MiB of RSS at start).
        .target(name: "BeaconURLSession", dependencies: ["Beacon", "BeaconHTTP"]),
        // The loopback HTTP/1.1 collector and the /metrics server: `beacon collect`, `beacon send
        // --metrics` and BeaconTesting (which re-exports it) share it; not a product of its own.
        // It needs only BeaconHTTP (gzip, HTTP dates, header fields): no tracker, no OpenSSL.
        .target(name: "BeaconHTTPServer", dependencies: ["BeaconHTTP"]),
        .target(name: "BeaconTesting", dependencies: ["Beacon", "BeaconHTTPServer"]),
        .executableTarget(name: "BeaconCLI", dependencies: ["Beacon", "BeaconLog", "BeaconHTTP", "BeaconHTTPServer", "BeaconURLSession"]),
        .executableTarget(
            name: "BeaconBenchmarks",
            dependencies: ["Beacon", "BeaconLog", "BeaconHTTP", "BeaconTesting", "BeaconTestSupport", "DelayProxy", "BeaconURLSession"],
            path: "Benchmarks/BeaconBenchmarks"
        ),
        // A TCP proxy delaying each direction (a collector far away on loopback; no netem here):
        // beacon-bench's distance phase and its tests use it, `beacon-delay-proxy` runs it alone.
        .target(name: "DelayProxy", path: "Benchmarks/DelayProxy"),
        .executableTarget(name: "beacon-delay-proxy", dependencies: ["DelayProxy"], path: "Benchmarks/BeaconDelayProxy"),
        // The chaos harness (`swift run beacon-chaos --seed S --duration 60s`): `beacon append`,
        // `beacon send --follow` and a tracker in child processes, killed, stopped and restarted
        // at random against a collector of its own answering every documented way; exact accounting.
        .executableTarget(
            name: "beacon-chaos",
            dependencies: ["Beacon", "BeaconLog", "BeaconTestSupport"],
            path: "Benchmarks/BeaconChaos"
        ),
        // A child process for crash tests: the tests start it and kill it with SIGKILL.
        .executableTarget(name: "beacon-test-child", dependencies: ["Beacon", "BeaconLog"], path: "Tests/Child"),
        // Helpers every test target uses: temporary directories, polling with a deadline, the
        // seeded generator, the built products' paths, and SpawnedProcess, the one way to start a
        // child process. beacon-bench and beacon-chaos start theirs with it too: it stays here
        // rather than in a target of its own because every caller already depends on this
        // internal target (not a product), and a library never starts processes.
        .target(name: "BeaconTestSupport", path: "Tests/BeaconTestSupport"),
        // The `.blocking` trait: suites whose tests block their thread run off the concurrency
        // pool (which has one thread per core), on threads of their own.
        .target(name: "BeaconTestTraits", path: "Tests/BeaconTestTraits"),
        // Every Swift block of README.md and of the DocC articles, compiled (never run);
        // ReadmeSnippetTests checks that each block is here verbatim, so they cannot drift from the API.
        .target(name: "ReadmeSnippets", dependencies: ["Beacon", "BeaconLog"], path: "Tests/ReadmeSnippets"),
        // The file system with scriptable faults and a journal of every call, which the suites share.
        .target(name: "FaultInjection", dependencies: ["BeaconLog"], path: "Tests/FaultInjection"),
        .testTarget(name: "BeaconLogTests", dependencies: ["BeaconLog", "BeaconTestSupport", "BeaconTestTraits", "FaultInjection", "beacon-test-child"]),
        .testTarget(name: "BeaconTests", dependencies: ["Beacon", "BeaconHTTP", "BeaconTLS", "BeaconHTTPServer", "BeaconURLSession", "BeaconLog", "BeaconTesting", "BeaconTestSupport", "BeaconTestTraits", "FaultInjection", "ReadmeSnippets", "beacon-test-child", "DelayProxy"]),
        // Also the ClickHouse integration suite: it drives the built `beacon`, the test child and a tracker.
        .testTarget(name: "BeaconCLITests", dependencies: ["Beacon", "BeaconLog", "BeaconCLI", "BeaconTesting", "BeaconTestSupport", "BeaconTestTraits", "beacon-test-child"]),
    ],
    swiftLanguageModes: [.v6]
)
