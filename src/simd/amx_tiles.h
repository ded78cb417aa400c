// What the two AMX units share (the attention's amx_bf16.cpp and the packed GEMM's
// gemm_amx.cpp): the tile configuration both load. Include only from units compiled with
// -mamx-tile (the intrinsics need it).
//
// Every tile is 16 rows x 64 bytes: 16 x 32 bf16, 16 x 64 bytes or 16 x 16 fp32/int32. A
// product's operands that are shorter (the last rows of a matrix) are read from padded memory
// instead of reconfigured tiles, because _tile_loadconfig zeroes every tile: changing a shape
// mid-product would cost a store and a reload of the accumulators.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace headcount::simd::amx {

// The 64-byte operand of LDTILECFG (palette 1).
struct TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// Tiles 0-7 as 16 x 64 bytes. The state is per thread, so each call that uses tiles loads it
// (cheap next to a product) and releases it when done.
inline void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
}

// As configure_tiles, but tiles 0-4 (the accumulators and x's tile of a product of one row tile,
// gemm_impl.h's amx_row_tile and amx_block<1, NC>) hold `rows` <= 16 rows: a decoded token's
// products then load and multiply one row, not 16 of which 15 are padding.
inline void configure_tiles_for_rows(int rows) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<std::uint8_t>(t < 5 ? rows : 16);
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
}

}  // namespace headcount::simd::amx
