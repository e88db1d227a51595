// The one type of a token id in verlpp's public API: what the tokenizer returns, what the
// rollout engine takes and returns, and what the batches' int64 id tensors (input_ids,
// responses) hold, so ids move between them without a conversion.
#pragma once

#include <cstdint>
#include <vector>

namespace verlpp {

// A token id (a row of the model's embedding): the dtype of every id tensor (at::kLong).
using TokenId = int64_t;
// A sequence of token ids (a prompt, a response).
using TokenIds = std::vector<TokenId>;

}  // namespace verlpp
