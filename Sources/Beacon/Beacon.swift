// The tracker lands here (issue 4).
@_exported import BeaconLog
