// swift-tools-version:6.0
//
// A Hummingbird 2 service with Beacon as a service of its ServiceGroup: one event per request on
// /track, an untracked /ok. Not part of Beacon's products: it is built and tested by test.sh
// (called from .ci/run), and every README snippet about services compiles here.
import PackageDescription

let package = Package(
    name: "ServiceExample",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.0.0"),
        .package(name: "Beacon", path: "../.."),
    ],
    targets: [
        .executableTarget(
            name: "ServiceExample",
            dependencies: [
                .product(name: "Beacon", package: "Beacon"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
