// beacon-delay-proxy: a TCP proxy on 127.0.0.1 that adds a round trip without capping bandwidth
// (DelayProxy), for trying delivery at a distance by hand:
//
//   swift run beacon-delay-proxy --to 8080 --rtt 100ms [--listen 0]
//
// Prints "listening on 127.0.0.1:PORT (RTT 100 ms to 127.0.0.1:8080)" and runs until SIGINT/SIGTERM.
import DelayProxy
import Foundation
import Glibc

func usage(_ message: String) -> Never {
    FileHandle.standardError.write(Data("beacon-delay-proxy: \(message)\nusage: beacon-delay-proxy --to PORT --rtt MILLISECONDS[ms] [--listen PORT]\n".utf8))
    exit(64)
}

var arguments = CommandLine.arguments.dropFirst()
var target: UInt16?, rtt: Int?, listenPort: UInt16 = 0
while let name = arguments.popFirst() {
    guard let value = arguments.popFirst() else { usage("\(name) needs a value") }
    switch name {
    case "--to": target = UInt16(value.split(separator: ":").last.map(String.init) ?? value)
    case "--rtt": rtt = Int(value.hasSuffix("ms") ? String(value.dropLast(2)) : value)
    case "--listen": listenPort = UInt16(value) ?? 0
    default: usage("unknown option \(name)")
    }
}
guard let target else { usage("--to PORT is required (the collector on 127.0.0.1)") }
guard let rtt, rtt >= 0 else { usage("--rtt MILLISECONDS is required") }
let proxy: DelayProxy
do {
    proxy = try DelayProxy(listenPort: listenPort, to: target, oneWay: .microseconds(rtt * 500))
} catch {
    usage("\(error.localizedDescription)")
}
FileHandle.standardOutput.write(Data("listening on 127.0.0.1:\(proxy.port) (RTT \(rtt) ms to 127.0.0.1:\(target))\n".utf8))
signal(SIGINT, SIG_IGN)
signal(SIGTERM, SIG_IGN)
let signals = DispatchSource.makeSignalSource(signal: SIGTERM)
let interrupts = DispatchSource.makeSignalSource(signal: SIGINT)
for source in [signals, interrupts] {
    source.setEventHandler { proxy.stop(); exit(0) }
    source.resume()
}
dispatchMain()
