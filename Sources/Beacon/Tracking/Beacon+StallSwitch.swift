import BeaconLog

@_spi(Testing)
extension Beacon.Configuration {
    /// Test-only: makes every fsync of the log (segments, checkpoint, directory) wait while a
    /// file exists at `controlFile`, so that a test from outside can stall the disk without root
    /// (the service example's `SERVICE_EXAMPLE_STALL_FSYNC_WHILE`). Never set it in production:
    /// the stall is real, and the writer reports it as a stalled disk.
    ///
    /// ```swift
    /// @_spi(Testing) import Beacon
    /// config.stallFsync(whileFileExists: "/tmp/stall")   // touch /tmp/stall … rm /tmp/stall
    /// ```
    public mutating func stallFsync(whileFileExists controlFile: String) {
        storage.fileSystem = StallingFileSystem(base: storage.fileSystem, controlFile: controlFile)
    }
}
