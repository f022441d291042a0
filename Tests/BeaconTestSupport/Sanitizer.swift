import Glibc

/// Whether this process runs under AddressSanitizer or ThreadSanitizer (their runtimes are linked
/// in): `malloc` is then the sanitizer's allocator, which has no glibc mmap threshold to check.
public var runsUnderSanitizer: Bool {
    dlsym(nil, "__asan_init") != nil   // nil: RTLD_DEFAULT
        || dlsym(nil, "__tsan_init") != nil
}
