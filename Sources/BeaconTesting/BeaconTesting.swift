// BeaconTesting: what users need to test their Beacon integration without a network.
//
// - `InMemoryTransport`: a scriptable `Transport` that records requests.
// - `ManualClock`: a monotonic clock that moves only when told to.
// - `LoopbackCollector`: a small HTTP/1.1 collector on 127.0.0.1 (also used by `beacon collect`
//   and `beacon-bench`), with `BatchSplitter` to cut a request body back into its events. Both
//   live in the package's internal BeaconHTTPServer module, re-exported here: it is no product
//   of its own, so this is how a user's tests reach them.
//
// Beacon is not re-exported: a test imports it, as the code under test does.
@_exported import BeaconHTTPServer
