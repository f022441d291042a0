// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there).
// The block is a fragment: it names no imports; these are the ones it needs.
import Beacon
import Glibc

func terminationHandler(beacon: Beacon) {
// README begin
beacon.installTerminationHandler { signal, report in exit(128 + signal) }
// README end
}
