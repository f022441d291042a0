// Test support (in-memory transport, manual clock, loopback collector) lands here (issue 5).
import Beacon
