import Glibc

/// HTTP/1.1 pipelining on the one keep-alive connection: requests are written without waiting
/// for the answers to those before them, and the answers are read in the order the requests
/// went (RFC 9112 §9.3.2). The uploader keeps a window of them outstanding; a collector that
/// mishandles this is told by what these calls report (the connection closed with requests
/// unanswered, an answer that ends the connection with requests behind it).
extension SocketConnection {
    /// Writes `request` whole without reading its answer; connects first when no request is
    /// outstanding and the connection is gone, idle-closed or to another endpoint.
    package func writePipelined(_ request: TransportRequest, to endpoint: SocketEndpoint, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        let head = try Self.head(request, endpoint)
        if outstanding == 0 && pipelined.leftover.isEmpty {
            if fd >= 0, peer != endpoint.connectionKey || peerHasClosed() { disconnect() }
            if fd < 0 {
                do {
                    try connect(endpoint, deadline: deadline, isCancelled: isCancelled)
                } catch .proxyAuthenticationRequired {
                    throw .proxyRefused("the proxy asks for authentication: put its user and password in the proxy URL")
                }
            }
        } else if fd < 0 || peer != endpoint.connectionKey {
            throw .closedBeforeAnswer(nil)
        }
        do {
            _ = try write(head, request.content, deadline: deadline, isCancelled: isCancelled, watchingForAnswer: false)
        } catch {
            disconnect()
            throw error
        }
        outstanding += 1
    }

    /// Reads the answer to the oldest request outstanding; `keepsAlive` false when the connection
    /// ended with it (it is closed then, and the requests behind it have no answer).
    package func readPipelined(deadline: UInt64, isCancelled: () -> Bool) throws(Failure) -> PipelinedAnswers.Answer {
        precondition(outstanding > 0, "readPipelined without a request outstanding")
        do {
            let answer = try nextPipelinedAnswer(deadline: deadline, isCancelled: isCancelled)
            outstanding -= 1
            if !answer.keepsAlive { disconnect() }
            return answer
        } catch {
            disconnect()
            throw error
        }
    }

    private func nextPipelinedAnswer(deadline: UInt64, isCancelled: () -> Bool) throws(Failure) -> PipelinedAnswers.Answer {
        do {
            if let answer = try pipelined.next() { return answer }
        } catch {
            throw .malformed(error.description)
        }
        while true {
            guard let stream else { throw .closedBeforeAnswer(nil) }
            let result = stream.read(into: buffer)
            switch result {
            case .done(let n) where n > 0:
                do {
                    if let answer = try pipelined.feed(UnsafeRawBufferPointer(rebasing: buffer[..<n])) { return answer }
                } catch {
                    throw .malformed(error.description)
                }
            case .done:
                do {
                    guard let answer = try pipelined.closed() else { throw Failure.closedBeforeAnswer(nil) }
                    return answer
                } catch let error as Failure {
                    throw error
                } catch {
                    throw .malformed("\(error)")
                }
            case .wait(let events):
                try wait(on: fd, for: events, deadline: deadline, isCancelled: isCancelled)
            case .truncated, .failed, .tls:
                throw Self.failure(reading: result, receivedAny: pipelined.receivedAny)
            }
        }
    }
}
