import Beacon
import Dispatch
import Foundation
import Glibc

/// `beacon-test-child send URL BYTES COUNT [CAFILE]`: sends COUNT requests, each with a body of
/// BYTES bytes, through `SocketTransport` (trusting CAFILE for `https://`), with `SIGPIPE` at its default
/// action (what a process that never touched it has); prints `status N` or `error CODE` for each
/// and exits 0. A collector that closes mid-request must give an error here, never kill the
/// process: the transport writes with `MSG_NOSIGNAL`, on the plain socket and in TLS.
func runSendChild(_ arguments: [String]) -> Never {
    guard (3...4).contains(arguments.count), let url = URL(string: arguments[0]), let size = Int(arguments[1]), let count = Int(arguments[2]) else {
        FileHandle.standardError.write(Data("usage: beacon-test-child send URL BYTES COUNT [CAFILE]\n".utf8))
        exit(64)
    }
    // A disposition of SIG_IGN survives exec: put the default back, as a fresh process has it.
    signal(SIGPIPE, SIG_DFL)
    let transport: SocketTransport
    do {
        transport = arguments.count == 4 ? try SocketTransport(tls: TLSConfiguration(caFile: arguments[3])) : SocketTransport()
    } catch {
        FileHandle.standardError.write(Data("beacon-test-child send: \(error)\n".utf8))
        exit(70)
    }
    let body = [UInt8](repeating: 0x61, count: size)
    let done = DispatchSemaphore(value: 0)
    Task {
        for _ in 0..<count {
            do {
                let response = try await transport.send(TransportRequest(url: url, body: body, timeout: .seconds(60)))
                print("status \(response.status)")
            } catch let error as TransportError {
                print("error \(error.code)")
            } catch {
                print("error \(error)")
            }
        }
        done.signal()
    }
    done.wait()
    exit(0)
}
