// The trainer's weights into a rollout engine (see the header): from units or from a whole model.
#include <verlpp/controller/engine_sync.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/tensor_parallel.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <set>

namespace verlpp::controller {

namespace {

int64_t bytes_of(const at::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

// Bytes of the engine's parameters whose storage is not among `shared_storages` (its own).
int64_t own_engine_bytes(const rollout::RolloutEngine& engine, const std::set<const void*>& shared_storages) {
  int64_t bytes = 0;
  std::set<const void*> counted;  // a tied head is the embedding: once
  for (const auto& [name, t] : engine.model().named_parameters()) {
    const void* storage = t.storage().data();
    if (shared_storages.count(storage) == 0 && counted.insert(t.data_ptr()).second) bytes += bytes_of(t);
  }
  return bytes;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --- the point-to-point reshard (sync_engine_from_units into a split engine) ---

// A rectangle of a parameter viewed as [rows, cols] (a 1-D parameter as [n, 1]).
struct Rect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  int64_t elements() const { return (r1 - r0) * (c1 - c0); }
  bool empty() const { return r1 <= r0 || c1 <= c0; }
};

Rect intersect(const Rect& a, const Rect& b) {
  return {std::max(a.r0, b.r0), std::min(a.r1, b.r1), std::max(a.c0, b.c0), std::min(a.c1, b.c1)};
}

// The flat range [a, e) of a row-major [rows, cols] tensor as at most three rectangles.
std::vector<Rect> flat_range_rects(int64_t a, int64_t e, int64_t cols) {
  std::vector<Rect> out;
  if (a >= e) return out;
  int64_t r0 = a / cols;
  const int64_t c0 = a % cols, r1 = e / cols, c1 = e % cols;
  if (r0 == r1) return {{r0, r0 + 1, c0, c1}};
  if (c0 > 0) out.push_back({r0, ++r0, c0, cols});
  if (r1 > r0) out.push_back({r0, r1, 0, cols});
  if (c1 > 0) out.push_back({r1, r1 + 1, 0, c1});
  return out;
}

// One parameter of a unit: where it lies in the unit's flat layout, its whole shape as
// [rows, cols], and the part one engine rank keeps.
struct UnitParam {
  std::string name;
  int64_t offset = 0, rows = 1, cols = 1;
  std::vector<int64_t> slice_shape;  // the engine rank's slice
};

// What engine rank `j` keeps of `p`, in the whole parameter's coordinates, and where that lands
// in its slice (the slice's row and column of the rectangle's first element).
Rect needed(const model::ModelConfig& config, const model::TensorParallelLayout& layout, const UnitParam& p, int64_t j,
            int64_t* row_shift, int64_t* col_shift) {
  const model::TensorParallelPart part = model::tensor_parallel_part(config, layout, p.name, j);
  *row_shift = part.dim == 0 ? part.begin : 0;
  *col_shift = part.dim == 1 ? part.begin : 0;
  if (part.dim == 0) return {part.begin, std::min(part.begin + part.count, p.rows), 0, p.cols};
  if (part.dim == 1) return {0, p.rows, part.begin, std::min(part.begin + part.count, p.cols)};
  return {0, p.rows, 0, p.cols};
}

// A piece of one parameter moving from a sender's shard into a receiver's slice.
struct Piece {
  size_t param = 0;
  Rect rect;
  int64_t row_shift = 0, col_shift = 0;  // whole coordinates -> slice coordinates
};

// The pieces rank `sender` (owning unit elements [sender S, (sender + 1) S)) has of what rank
// `receiver`'s engine rank keeps, in a fixed order both ranks compute alike.
std::vector<Piece> pieces_between(const model::ModelConfig& config, const model::TensorParallelLayout& layout,
                                  const std::vector<UnitParam>& params, int64_t shard, int64_t sender,
                                  int64_t receiver) {
  std::vector<Piece> out;
  const int64_t j = receiver % layout.size, own0 = sender * shard, own1 = own0 + shard;
  for (size_t k = 0; k < params.size(); ++k) {
    const UnitParam& p = params[k];
    const int64_t a = std::max<int64_t>(own0 - p.offset, 0), e = std::min<int64_t>(own1 - p.offset, p.rows * p.cols);
    Piece piece;
    piece.param = k;
    const Rect want = needed(config, layout, p, j, &piece.row_shift, &piece.col_shift);
    for (const Rect& have : flat_range_rects(a, e, p.cols)) {
      piece.rect = intersect(have, want);
      if (!piece.rect.empty()) out.push_back(piece);
    }
  }
  return out;
}

// The elements of `r` in a row-major tensor with `cols` columns stored flat in `t` from
// `first` on, as a [rows, cols] strided view.
at::Tensor rect_view(const at::Tensor& t, int64_t first, int64_t cols, const Rect& r) {
  return t.as_strided({r.r1 - r.r0, r.c1 - r.c0}, {cols, 1}, t.storage_offset() + first + r.r0 * cols + r.c0);
}

// The partner of `rank` in round `round` of a round-robin tournament over `ranks` (a dummy
// partner, returned as -1, makes an odd count even): every pair meets once in ranks - 1 rounds
// (ranks rounds when odd), each rank in at most one pair per round.
int64_t partner_in_round(int64_t rank, int64_t round, int64_t ranks) {
  const int64_t m = ranks % 2 == 0 ? ranks : ranks + 1, last = m - 1;
  int64_t partner = 0;
  if (rank == last)
    partner = round;
  else if (rank == round)
    partner = last;
  else
    partner = ((2 * round - rank) % last + last) % last;
  return partner >= ranks ? -1 : partner;
}

// Units sharded over the ranks of `group` into engines split over consecutive blocks of t of
// them: each rank receives from every other rank the part of its shard that its own engine rank
// keeps (point to point), and nothing else.
EngineSyncReport sync_slices_point_to_point(train::ShardedWeights& units, rollout::RolloutEngine& engine,
                                            const hw::ProcessGroup& group) {
  const auto start = std::chrono::steady_clock::now();
  EngineSyncReport report;
  const model::ModelConfig& config = units.model().config();
  const model::TensorParallelLayout layout =
      model::tensor_parallel_layout(config, engine.model().tensor_parallel()->size());
  const std::vector<model::ParamSpec> specs = model::parameter_specs(config);
  const int64_t ranks = group.world_size(), me = group.rank();
  for (int64_t unit = 0; unit < units.num_units(); ++unit) {
    const auto unit_start = std::chrono::steady_clock::now();
    const at::Tensor shard = units.compute_shard(unit);
    const int64_t shard_elements = units.shard_elements(unit), element = int64_t(shard.element_size());
    std::vector<UnitParam> params;
    std::vector<at::Tensor> slices;
    int64_t held = 0;
    for (const train::ShardedWeights::Placement& place : units.placements(unit)) {
      const model::ParamSpec& spec = specs.at(place.param);
      VERLPP_CHECK(spec.shape.size() <= 2, "engine sync: '{}' has {} dimensions", spec.name, spec.shape.size());
      UnitParam p;
      p.name = spec.name;
      p.offset = place.offset;
      p.rows = spec.shape.empty() ? 1 : spec.shape[0];
      p.cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
      report.source_bytes += p.rows * p.cols * element;
      const model::TensorParallelPart part = model::tensor_parallel_part(config, layout, p.name, me % layout.size);
      p.slice_shape = spec.shape;
      if (part.dim >= 0) p.slice_shape[size_t(part.dim)] = part.count;
      // Zeros: the padding rows of the last rank's vocabulary stay zero.
      slices.push_back(at::zeros(p.slice_shape, shard.options()));
      held += slices.back().numel() * element;
      params.push_back(std::move(p));
    }
    const int64_t received_before = report.received_bytes;
    auto slice_view = [&](const Piece& piece) {
      const UnitParam& p = params[piece.param];
      Rect r = piece.rect;
      r.r0 -= piece.row_shift, r.r1 -= piece.row_shift, r.c0 -= piece.col_shift, r.c1 -= piece.col_shift;
      const int64_t slice_cols = p.slice_shape.size() == 2 ? p.slice_shape[1] : 1;
      return rect_view(slices[piece.param], 0, slice_cols, r);
    };
    auto shard_view = [&](const Piece& piece) {
      const UnitParam& p = params[piece.param];
      return rect_view(shard, p.offset - me * shard_elements, p.cols, piece.rect);
    };
    // This rank's own shard first, then one partner per round.
    for (const Piece& piece : pieces_between(config, layout, params, shard_elements, me, me))
      slice_view(piece).copy_(shard_view(piece));
    int64_t buffers = 0;
    const int64_t rounds = ranks % 2 == 0 ? ranks - 1 : ranks;
    for (int64_t round = 0; round < rounds; ++round) {
      const int64_t peer = partner_in_round(me, round, ranks);
      if (peer < 0) continue;
      const std::vector<Piece> out = pieces_between(config, layout, params, shard_elements, me, peer);
      const std::vector<Piece> in = pieces_between(config, layout, params, shard_elements, peer, me);
      int64_t out_elements = 0, in_elements = 0;
      for (const Piece& piece : out) out_elements += piece.rect.elements();
      for (const Piece& piece : in) in_elements += piece.rect.elements();
      at::Tensor send, receive;
      if (out_elements > 0) {
        send = at::empty({out_elements}, shard.options());
        int64_t at_element = 0;
        for (const Piece& piece : out) {
          const at::Tensor src = shard_view(piece);
          send.narrow(0, at_element, piece.rect.elements()).view(src.sizes()).copy_(src);
          at_element += piece.rect.elements();
        }
      }
      if (in_elements > 0) receive = at::empty({in_elements}, shard.options());
      // The lower rank of the pair sends first, the higher receives first.
      auto do_send = [&] {
        if (out_elements > 0) group.send(send, int32_t(peer));
      };
      auto do_receive = [&] {
        if (in_elements > 0) group.recv(receive, int32_t(peer));
      };
      if (me < peer) {
        do_send();
        do_receive();
      } else {
        do_receive();
        do_send();
      }
      int64_t at_element = 0;
      for (const Piece& piece : in) {
        at::Tensor dst = slice_view(piece);
        dst.copy_(receive.narrow(0, at_element, piece.rect.elements()).view(dst.sizes()));
        at_element += piece.rect.elements();
      }
      report.received_bytes += in_elements * element;
      buffers = std::max(buffers, (out_elements + in_elements) * element);
    }
    report.peak_held_bytes = std::max(report.peak_held_bytes, held + buffers);
    report.unit_received_bytes.push_back(report.received_bytes - received_before);
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (size_t k = 0; k < params.size(); ++k) named.emplace_back(params[k].name, slices[k]);
    report.copied += engine.update_weights(named, rollout::WeightSharing::kCopy).num_copied;
    report.unit_seconds.push_back(seconds_since(unit_start));
  }
  report.engine_bytes = own_engine_bytes(engine, {});
  report.seconds = seconds_since(start);
  return report;
}

}  // namespace

EngineSyncReport sync_engine_from_units(train::ShardedWeights& units, rollout::RolloutEngine& engine) {
  const bool gathers = units.gathers_per_use();
  // A split engine over consecutive blocks of the units' ranks (rollout::engine_group) takes its
  // slices point to point; a whole engine needs every element, which the all-gather brings.
  const model::TensorParallelGroup* tp = engine.model().tensor_parallel();
  const hw::ProcessGroup* group = units.options().dp.group();
  if (gathers && tp != nullptr && tp->size() > 1 && group != nullptr && group->world_size() % tp->size() == 0 &&
      group->rank() % tp->size() == tp->rank())
    return sync_slices_point_to_point(units, engine, *group);
  const auto start = std::chrono::steady_clock::now();
  EngineSyncReport report;
  int64_t unit = 0;
  auto unit_start = std::chrono::steady_clock::now();  // for_each_unit gathers before each call
  units.for_each_unit([&](const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    int64_t whole = 0;
    for (const auto& [name, t] : tensors) whole += bytes_of(t);
    report.source_bytes += whole;
    int64_t received = 0;
    if (gathers) {
      // The all-gather brought every shard but this rank's (the padding travels too).
      const int64_t element = tensors.empty() ? 0 : int64_t(tensors.front().second.element_size());
      received = (units.padded_elements(unit) - units.shard_elements(unit)) * element;
      report.peak_held_bytes = std::max(report.peak_held_bytes, units.padded_elements(unit) * element);
    }
    report.received_bytes += received;
    report.unit_received_bytes.push_back(received);
    report.copied += engine.update_weights(tensors, rollout::WeightSharing::kCopy).num_copied;
    report.unit_seconds.push_back(seconds_since(unit_start));
    unit_start = std::chrono::steady_clock::now();
    ++unit;
  });
  report.engine_bytes = own_engine_bytes(engine, {});
  report.seconds = seconds_since(start);
  return report;
}

EngineSyncReport sync_engine_from_model(const model::DecoderLM& source, rollout::RolloutEngine& engine) {
  const auto start = std::chrono::steady_clock::now();
  EngineSyncReport report;
  const bool split = engine.model().tensor_parallel() != nullptr;
  // A split engine keeps its slice of each tensor in buffers of its own (cut one at a time).
  const rollout::WeightUpdateReport r =
      split ? engine.update_weights(source.named_parameters(), rollout::WeightSharing::kCopy)
            : engine.update_weights(source);
  report.shared = r.num_shared;
  report.copied = r.num_copied;
  std::set<const void*> storages;
  for (const auto& [name, t] : source.named_parameters()) {
    report.source_bytes += bytes_of(t);
    storages.insert(t.storage().data());
  }
  report.engine_bytes = own_engine_bytes(engine, storages);
  report.seconds = seconds_since(start);
  return report;
}

}  // namespace verlpp::controller
