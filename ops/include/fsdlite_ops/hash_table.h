// Pieces of the open-addressing voxel-key tables (linear probing, power-of-two capacity) shared by the
// voxelize, rulebook and connected_components kernels; usable from host and device code.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FSDLITE_HT_HD __host__ __device__
#else
#define FSDLITE_HT_HD
#endif

namespace fsdlite::hash_table {

// Empty slot of a key table: keys are >= 0, so an empty slot is -1 (all bits set as a 64-bit word, the
// value atomicCAS compares against on the device).
constexpr int64_t kEmpty = -1;
constexpr unsigned long long kEmptyWord = static_cast<unsigned long long>(kEmpty);

// Two xor-shift / multiply rounds and a final xor-shift: the shape of the 64-bit finalisers below.
template <int S1, uint64_t M1, int S2, uint64_t M2, int S3>
FSDLITE_HT_HD inline uint64_t xorshift_multiply(uint64_t x) {
  x ^= x >> S1;
  x *= M1;
  x ^= x >> S2;
  x *= M2;
  x ^= x >> S3;
  return x;
}

// splitmix64 finaliser: spreads voxel keys over a table.
FSDLITE_HT_HD inline uint64_t mix_key(uint64_t x) {
  return xorshift_multiply<30, 0xbf58476d1ce4e5b9ULL, 27, 0x94d049bb133111ebULL, 31>(x);
}

// MurmurHash3 fmix64 finaliser (used to combine the fields of a multi-field key).
FSDLITE_HT_HD inline uint64_t fmix64(uint64_t x) {
  return xorshift_multiply<33, 0xff51afd7ed558ccdULL, 33, 0xc4ceb9fe1a85ec53ULL, 33>(x);
}

// Capacity of a table for n keys: the smallest power of two >= 2 * n (and >= 16), so the load factor
// stays <= 0.5.
inline int64_t table_capacity(int64_t n) {
  int64_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  return cap;
}

}  // namespace fsdlite::hash_table
