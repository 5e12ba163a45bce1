// The `lm` model's attention ops (model/lm_spec.hpp states the formulas): RoPE and causal
// multi-head / grouped-query self-attention, forward and backward by hand, in T (float, double,
// or a wider reference scalar of sim/mlp_precision.hpp: those instantiations are in
// lm_attention.cpp, not declared here, which keeps Boost out of a header the CUDA step includes).
//
// Layout: rows are token positions, row i = b seq + t; q [M x heads hd], k and v
// [M x kv_heads hd], head h in columns h hd .. (h+1) hd - 1; query head h reads kv head
// h / (heads / kv_heads).
//
// bf16 (T = float only): the operands of the six products - Q K^T, P V forward; dO V^T,
// P^T dO, dS K, dS^T Q backward - are rounded to BF16 (RNE) and every product accumulates in
// FP32: each output element c = 0, c = c + a b in ascending order of the summed index. The
// softmax, its backward (with the unrounded P) and the scaling stay in T. Without bf16 the
// same code runs on T operands (the reference's).
//
// Threads: work is split over (sequence, head) in the forward and (sequence, kv head) in the
// backward; each task writes its own output elements and no sum crosses tasks, so the results
// do not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4d {

struct AttentionShape {
  std::int64_t batch = 1, seq = 1, heads = 1, kv_heads = 1, head_dim = 2;
  std::int64_t rows() const { return batch * seq; }
};

// cos and sin of t theta_i, theta_i = base^(-2i / head_dim), i < head_dim / 2, t < seq:
// angle, cos and sin in double, rounded to T (float, double); in T for a wider T (Boost's pow,
// cos and sin: a few ulps of T). Entry t * (head_dim / 2) + i.
template <class T>
struct RopeTable {
  std::int64_t seq = 0, head_dim = 0;
  std::vector<T> cos, sin;
};
template <class T>
RopeTable<T> rope_table(std::int64_t seq, std::int64_t head_dim, double base);

// Rotates the pairs (2i, 2i+1) of every head of x [rows x heads head_dim] in place, the
// position of row r being r % table.seq; inverse applies the transposed rotation (the
// backward of the forward rotation).
template <class T>
void rope_rotate(const RopeTable<T>& table, T* x, std::int64_t rows, std::int64_t heads, bool inverse);

// o [M x heads hd] = the heads' outputs (scale = 1 / sqrt(hd): double's rounded to T, or
// computed in a wider T).
template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, bool bf16, T* o);

// From the forward's inputs and dO = dout [M x heads hd]: dq [M x heads hd], dk, dv
// [M x kv_heads hd] (overwritten). The softmax is recomputed from q and k by the forward's
// code, so it has the forward's bits.
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* dout, bool bf16, T* dq,
                        T* dk, T* dv);

// The probabilities P [seq x seq] (zero above the diagonal) of sequence b, head h: what the
// forward uses.
template <class T>
std::vector<T> attention_probabilities(const AttentionShape& s, const T* q, const T* k, bool bf16, std::int64_t b,
                                       std::int64_t h);

extern template RopeTable<float> rope_table<float>(std::int64_t, std::int64_t, double);
extern template RopeTable<double> rope_table<double>(std::int64_t, std::int64_t, double);
extern template void rope_rotate<float>(const RopeTable<float>&, float*, std::int64_t, std::int64_t, bool);
extern template void rope_rotate<double>(const RopeTable<double>&, double*, std::int64_t, std::int64_t, bool);
extern template void attention_forward<float>(const AttentionShape&, const float*, const float*, const float*, bool,
                                              float*);
extern template void attention_forward<double>(const AttentionShape&, const double*, const double*, const double*,
                                               bool, double*);
extern template void attention_backward<float>(const AttentionShape&, const float*, const float*, const float*,
                                               const float*, bool, float*, float*, float*);
extern template void attention_backward<double>(const AttentionShape&, const double*, const double*, const double*,
                                                const double*, bool, double*, double*, double*);
extern template std::vector<float> attention_probabilities<float>(const AttentionShape&, const float*, const float*,
                                                                  bool, std::int64_t, std::int64_t);
extern template std::vector<double> attention_probabilities<double>(const AttentionShape&, const double*,
                                                                    const double*, bool, std::int64_t, std::int64_t);

}  // namespace fp4d
