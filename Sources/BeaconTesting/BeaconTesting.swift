// BeaconTesting: what users need to test their Beacon integration without a network.
//
// - `InMemoryTransport`: a scriptable `Transport` that records requests.
// - `ManualClock`: a monotonic clock that moves only when told to.
// - `LoopbackCollector`: a small HTTP/1.1 collector on 127.0.0.1 (also used by `beacon collect`
//   and `beacon-bench`).
@_exported import Beacon
