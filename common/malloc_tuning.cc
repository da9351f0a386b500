#include "common/malloc_tuning.h"

#include <malloc.h>

namespace shardps {

void KeepFreedMemoryForReuse() {
  // Blocks up to 32 MB (glibc's largest threshold) come from the heap, not
  // fresh mmaps, and the heap is not trimmed below 1 GB of free memory.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_ARENA_MAX, 4);
}

int64_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);  // heap blocks in use, and mmapped ones
}

}  // namespace shardps
