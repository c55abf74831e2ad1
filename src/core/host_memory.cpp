// host_memory.cpp — keep_freed_host_memory (see host_memory.h).
#include "core/host_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace lowbit {

void keep_freed_host_memory() {
#if defined(__GLIBC__)
    // No mmap'd chunks: large blocks come from the heap (a thread arena that cannot hold one retries the main
    // arena), and free() never returns the heap's top to the system.
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
#endif
}

}  // namespace lowbit
