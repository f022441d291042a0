import Foundation

/// Placeholder until its owner lands; replaced by the real role.
func runLogChild(_ arguments: [String]) -> Never {
    FileHandle.standardError.write(Data("beacon-test-child: role not built yet\n".utf8))
    exit(70)
}
