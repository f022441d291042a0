// swift-tools-version:6.0
//
// libFuzzer targets for every parser of bytes Beacon did not write itself (issue 20). A package of
// its own, so the root package's build and tests never see it. Build and run with
// `Benchmarks/fuzz.sh TARGET SECONDS`; built plainly (`swift build` here), each target replays
// the files and directories given as arguments instead (see FuzzSupport/FuzzMain.swift).
// The parsers are internal: the targets use `@testable import` (debug builds enable testing).
import PackageDescription

let package = Package(
    name: "BeaconFuzz",
    dependencies: [.package(name: "Beacon", path: "../..")],
    targets: [
        .target(name: "CFuzzDriver"),
        .target(name: "FuzzSupport", dependencies: ["CFuzzDriver"]),
        // JSONValidator.swift is a link to Sources/BeaconCLI's (an executable target cannot be imported).
        .executableTarget(name: "FuzzJSON", dependencies: ["FuzzSupport"]),
        .executableTarget(name: "FuzzHTTPResponse", dependencies: ["FuzzSupport", .product(name: "Beacon", package: "Beacon")]),
        .executableTarget(name: "FuzzSegments", dependencies: ["FuzzSupport", .product(name: "BeaconLog", package: "Beacon")]),
        .executableTarget(name: "FuzzStateFiles", dependencies: ["FuzzSupport", .product(name: "Beacon", package: "Beacon"), .product(name: "BeaconLog", package: "Beacon")]),
        .executableTarget(name: "FuzzCollector", dependencies: ["FuzzSupport", .product(name: "BeaconTesting", package: "Beacon"), .product(name: "Beacon", package: "Beacon")]),
        .executableTarget(name: "FuzzGzip", dependencies: ["FuzzSupport", .product(name: "BeaconTesting", package: "Beacon"), .product(name: "Beacon", package: "Beacon")]),
    ],
    swiftLanguageModes: [.v6]
)
