import Beacon
import BeaconTestSupport
import BeaconTestTraits
import BeaconTesting
import Foundation
import Testing

/// Delivering a backlog leaves glibc's mmap threshold where it was (issue 29). `free` of a block
/// `malloc` had mapped (128 KiB and more) raises the threshold to that block's size, after which
/// every later block below it, the host service's too, comes from the malloc arenas and stays
/// there when freed, and each arena keeps up to twice the threshold of free memory resident: a
/// service that had delivered 1M events held +14 MiB of RSS in ~9 arenas. Catch-up requests carry
/// up to `maxBatchBytes` (1 MiB): their bodies (and gzip's output) are mapped by the body itself
/// (`RequestBody`). Not yet the read's per-record arrays: a catch-up read of 4,096 records or
/// more (events under ~256 bytes) holds an array of slices of 128 KiB or more (32 bytes each),
/// and its `free` still raises the threshold (a known issue, below). Capping catch-up requests at
/// 4,000 events avoided it but cost ~20 % of beacon-bench's upload throughput against a fast
/// collector (more requests for the same bytes).
///
/// Each case runs `beacon-test-child burst DIR upload` (BurstChild.swift) in a fresh process,
/// where nothing else moved the threshold: 1.5 MB of records of the given size delivered to a
/// loopback collector, then whether a 128 KiB block is still mapped.
@Suite("Delivery: a backlog's catch-up requests leave glibc's mmap threshold as it was", .timeLimit(.minutes(3)), .blocking)
struct UploadMmapThresholdTests {
    /// Fails on the code before: a body of ~1 MiB (records of 600 bytes) or its gzip output, from
    /// `malloc` and freed after its answer, raised the threshold to 1 MiB. With records of 60 bytes
    /// the read's array of 16,000 slices (512 KiB) still does: a known issue.
    @Test("records of 600 bytes, every format, gzipped or not; of 60 bytes a known issue", arguments: [
        (600, PayloadFormat.jsonArray, false), (600, .envelope, false), (600, .ndjson, false),
        (600, .jsonArray, true), (600, .ndjson, true), (60, .jsonArray, false), (60, .envelope, true),
    ])
    func catchUpLeavesTheMmapThreshold(bytes: Int, format: PayloadFormat, gzip: Bool) async throws {
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let child = try DeliverChild(arguments: ["burst", dir.path, "upload", collector.url.absoluteString, String(bytes), format.rawValue] + (gzip ? ["gzip"] : []))
        defer { child.kill() }
        let finished = await child.finish()
        let lines = child.output
        #expect(finished, "the child's output was not all read: \(lines)")
        let baseline = lines.first { $0.hasPrefix("baseline ") }
        // Under a sanitizer `malloc` is the sanitizer's allocator (`.ci/run`'s AddressSanitizer
        // suite), which has no mmap threshold: its "mapped" and "heap" say nothing of glibc's (the
        // fresh-clone ASan run saw "baseline mapped" then "after heap").
        if runsUnderSanitizer { return }
        try #require(baseline == "baseline mapped", "the threshold had moved before the delivery: nothing to check (\(lines))")
        if bytes < 256 {
            withKnownIssue("a catch-up read of over 4,095 records holds an array of slices of 128 KiB or more, whose free raises the threshold", isIntermittent: true) {
                #expect(lines.contains("after mapped"), "records of \(bytes) bytes as \(format.rawValue): \(lines)")
            }
        } else {
            #expect(lines.contains("after mapped"), "a 128 KiB block came from the heap after delivering records of \(bytes) bytes as \(format.rawValue)\(gzip ? ", gzipped" : ""): a catch-up request's blocks raised glibc's mmap threshold (\(lines))")
        }
        #expect(child.process.wait() == .exited(0), "the child failed (\(lines))")
    }
}
