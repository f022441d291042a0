// beacon-test-child: a child process for crash tests. Tests start it with a role and its
// arguments, read its stdout, and kill it with SIGKILL at random moments.
//
//   beacon-test-child log ...     BeaconLog appender (LogChild.swift)
//   beacon-test-child lock ...    holds a directory lock until killed (LockChild.swift)
//   beacon-test-child track ...   Beacon tracker (TrackChild.swift)
//   beacon-test-child deliver ... tracker + uploader to a collector (DeliverChild.swift)
//   beacon-test-child upload ...  an uploader alone draining a backlog (UploadChild.swift)
//   beacon-test-child stall ...   a frozen writer and a probe on the cooperative pool (StallChild.swift)
//   beacon-test-child send ...    one request to a collector that may close mid-request (SendChild.swift)
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "log": runLogChild(Array(arguments.dropFirst()))
case "lock": runLockChild(Array(arguments.dropFirst()))
case "track": runTrackChild(Array(arguments.dropFirst()))
case "deliver": runDeliverChild(Array(arguments.dropFirst()))
case "upload": runUploadChild(Array(arguments.dropFirst()))
case "stall": runStallChild(Array(arguments.dropFirst()))
case "send": runSendChild(Array(arguments.dropFirst()))
default:
    FileHandle.standardError.write(Data("usage: beacon-test-child log|lock|track|deliver|upload|stall|send ARGS...\n".utf8))
    exit(64)
}
