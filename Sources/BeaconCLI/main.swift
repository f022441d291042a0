// beacon: the operator's tool for Beacon log directories. See `beacon help`.
import Glibc

exit(BeaconTool.main(Array(CommandLine.arguments.dropFirst())))
