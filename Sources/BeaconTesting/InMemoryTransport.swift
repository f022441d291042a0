import Beacon
import Synchronization

/// A `Transport` that answers from a script and records every request, for tests.
///
/// Replies are taken in order from the script; once it is empty, `defaultReply` answers (200 by
/// default). A `handler` may decide instead, for example to refuse bodies holding a marker.
///
/// ```swift
/// let transport = InMemoryTransport()
/// transport.enqueue(.status(503), .status(503))   // then 200
/// ```
public final class InMemoryTransport: Transport {
    /// One scripted answer.
    public enum Reply: Sendable {
        /// Answer with this status, headers and body.
        case status(Int, headers: HTTPHeaders = [:], body: String = "")
        /// Fail without an HTTP answer.
        case failure(TransportError)
        /// Never answer: the request waits until its task is cancelled.
        case hang
    }

    struct State {
        var script: [Reply] = []
        var defaultReply: Reply = .status(200)
        var handler: (@Sendable (TransportRequest) -> Reply?)?
        var requests: [TransportRequest] = []
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var held = false
        var heldRequests: [CheckedContinuation<Void, Never>] = []
    }

    let state = Mutex(State())

    /// A transport answering `replies` in order, then 200.
    public init(replies: [Reply] = []) {
        state.withLock { $0.script = replies }
    }

    /// Adds replies to the end of the script.
    public func enqueue(_ replies: Reply...) {
        state.withLock { $0.script.append(contentsOf: replies) }
    }

    /// The answer once the script is empty. Default 200.
    public var defaultReply: Reply {
        get { state.withLock { $0.defaultReply } }
        set { state.withLock { $0.defaultReply = newValue } }
    }

    /// Decides the answer before the script does; return nil to fall through to it.
    public func setHandler(_ handler: (@Sendable (TransportRequest) -> Reply?)?) {
        state.withLock { $0.handler = handler }
    }

    /// Makes requests wait (after they are recorded) until ``release()``.
    public func hold() {
        state.withLock { $0.held = true }
    }

    /// Lets held requests and later ones through.
    public func release() {
        let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.held = false
            defer { s.heldRequests = [] }
            return s.heldRequests
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Every request received, in order.
    public var requests: [TransportRequest] { state.withLock { $0.requests } }

    /// Returns once at least `count` requests were received.
    public func waitForRequests(count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> Bool in
                if s.requests.count >= count { return true }
                s.watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let (reply, ready) = state.withLock { s -> (Reply, [CheckedContinuation<Void, Never>]) in
            s.requests.append(request)
            var ready: [CheckedContinuation<Void, Never>] = []
            s.watchers.removeAll { w in
                guard s.requests.count >= w.count else { return false }
                ready.append(w.continuation)
                return true
            }
            if let handler = s.handler, let reply = handler(request) { return (reply, ready) }
            if !s.script.isEmpty { return (s.script.removeFirst(), ready) }
            return (s.defaultReply, ready)
        }
        for continuation in ready { continuation.resume() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let wait = state.withLock { s -> Bool in
                if s.held { s.heldRequests.append(continuation) }
                return s.held
            }
            if !wait { continuation.resume() }
        }
        switch reply {
        case .status(let status, let headers, let body):
            try Task.checkCancellation()
            return TransportResponse(status: status, headers: headers, body: Array(body.utf8))
        case .failure(let error):
            throw error
        case .hang:
            let (never, keepOpen) = AsyncStream<Void>.makeStream()
            for await _ in never {}
            keepOpen.finish()
            throw TransportError(.cancelled, "the request was cancelled while the in-memory transport held it")
        }
    }
}
