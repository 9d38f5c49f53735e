// Microbenchmarks of the wire codec (src/protocol/codec.h): how many bytes and
// messages per second the frame splitter and the typed decoders/encoders
// handle on the messages that dominate a pooler's hot path.
//
// Each benchmark reports bytes_per_second (MB/s) and items_per_second
// (messages/s; ns/message = 1e9 / items_per_second). bench/report.py turns
// the JSON output into the "codec" table of the report.
//
//   build/bench/bench_codec --benchmark_min_time=0.2

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "protocol/codec.h"

namespace hp = hyperpool::protocol;

namespace {

// A pgbench -S result row: one int4 column ("abalance") as text.
std::string NarrowRow() {
  std::string out;
  std::vector<hp::NullableValue> cols = {std::string_view("-4711")};
  hp::EncodeDataRow(cols, out);
  return out;
}

// A typical "web" row: 8 columns, ~200 bytes, one NULL.
std::string WideRow() {
  std::string out;
  std::vector<hp::NullableValue> cols = {
      std::string_view("123456"),
      std::string_view("alice@example.com"),
      std::string_view("Alice Example"),
      std::nullopt,
      std::string_view("2024-05-01 12:34:56.789+00"),
      std::string_view("t"),
      std::string_view("{\"plan\":\"pro\",\"seats\":12,\"flags\":[\"a\",\"b\",\"c\"]}"),
      std::string_view(std::string(64, 'x')),
  };
  hp::EncodeDataRow(cols, out);
  return out;
}

std::string Repeat(const std::string& frame, size_t target_bytes, size_t* count) {
  std::string buf;
  *count = 0;
  while (buf.size() < target_bytes) {
    buf += frame;
    ++*count;
  }
  return buf;
}

// FrameReader over a 256 kB buffer of DataRow frames: split only (what a
// forwarding pooler does per message).
void BM_FrameReader_Split(benchmark::State& state, std::string frame) {
  size_t count = 0;
  const std::string buf = Repeat(frame, 256 * 1024, &count);
  hp::FrameReader reader(hp::FrameReader::Mode::kTagged);
  for (auto _ : state) {
    std::string_view rest = buf;
    size_t frames = 0;
    for (;;) {
      hp::FrameReader::Result r = reader.Read(rest);
      if (!r.is_frame()) break;
      rest.remove_prefix(r.frame().size());
      ++frames;
    }
    benchmark::DoNotOptimize(frames);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(buf.size()));
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(count));
}
BENCHMARK_CAPTURE(BM_FrameReader_Split, narrow_datarow, NarrowRow());
BENCHMARK_CAPTURE(BM_FrameReader_Split, wide_datarow, WideRow());

// Split + DecodeDataRow + walk every column (what a cache fill does).
void BM_DecodeDataRow(benchmark::State& state, std::string frame) {
  size_t count = 0;
  const std::string buf = Repeat(frame, 256 * 1024, &count);
  hp::FrameReader reader(hp::FrameReader::Mode::kTagged);
  for (auto _ : state) {
    std::string_view rest = buf;
    size_t total = 0;
    for (;;) {
      hp::FrameReader::Result r = reader.Read(rest);
      if (!r.is_frame()) break;
      absl::StatusOr<hp::DataRow> row = hp::DecodeDataRow(r.frame().payload);
      if (!row.ok()) state.SkipWithError("decode failed");
      for (hp::NullableValue v : *row) total += v ? v->size() : 1;
      rest.remove_prefix(r.frame().size());
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(buf.size()));
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(count));
}
BENCHMARK_CAPTURE(BM_DecodeDataRow, narrow, NarrowRow());
BENCHMARK_CAPTURE(BM_DecodeDataRow, wide, WideRow());

// EncodeDataRow of the wide row into a reused buffer.
void BM_EncodeDataRow_Wide(benchmark::State& state) {
  const std::string big(64, 'x');
  std::vector<hp::NullableValue> cols = {
      std::string_view("123456"), std::string_view("alice@example.com"),
      std::string_view("Alice Example"), std::nullopt,
      std::string_view("2024-05-01 12:34:56.789+00"), std::string_view("t"),
      std::string_view("{\"plan\":\"pro\",\"seats\":12,\"flags\":[\"a\",\"b\",\"c\"]}"),
      std::string_view(big)};
  std::string out;
  size_t bytes = 0;
  for (auto _ : state) {
    out.clear();
    hp::EncodeDataRow(cols, out);
    bytes += out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(bytes));
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_EncodeDataRow_Wide);

// pgbench -M extended/prepared: one Bind with one text parameter.
hp::Bind PgbenchBind() {
  hp::Bind b;
  b.statement = "P_0";
  b.parameter_formats = {};
  b.parameters = {std::string_view("48213")};
  b.result_formats = {};
  return b;
}

void BM_DecodeBind(benchmark::State& state) {
  std::string frame;
  hp::Encode(PgbenchBind(), frame);
  hp::FrameReader reader(hp::FrameReader::Mode::kTagged);
  const hp::Frame f = reader.Read(frame).frame();
  for (auto _ : state) {
    absl::StatusOr<hp::Bind> b = hp::DecodeBind(f.payload);
    benchmark::DoNotOptimize(b);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(frame.size()));
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_DecodeBind);

void BM_EncodeBind(benchmark::State& state) {
  const hp::Bind b = PgbenchBind();
  std::string out;
  size_t bytes = 0;
  for (auto _ : state) {
    out.clear();
    hp::Encode(b, out);
    bytes += out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(bytes));
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_EncodeBind);

constexpr std::string_view kPgbenchSelect = "SELECT abalance FROM pgbench_accounts WHERE aid = $1;";

void BM_DecodeParse(benchmark::State& state) {
  std::string frame;
  hp::Encode(hp::Parse{"P_0", kPgbenchSelect, {23}}, frame);
  hp::FrameReader reader(hp::FrameReader::Mode::kTagged);
  const hp::Frame f = reader.Read(frame).frame();
  for (auto _ : state) {
    absl::StatusOr<hp::Parse> p = hp::DecodeParse(f.payload);
    benchmark::DoNotOptimize(p);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(frame.size()));
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_DecodeParse);

void BM_EncodeQuery(benchmark::State& state) {
  const hp::Query q{"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;"};
  std::string out;
  size_t bytes = 0;
  for (auto _ : state) {
    out.clear();
    hp::Encode(q, out);
    bytes += out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(bytes));
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_EncodeQuery);

// One pgbench -M extended transaction as the client sends it
// (Parse/Bind/Describe/Execute/Sync in one flight): split + typed decode of
// every message, as the Client half's inspection would.
void BM_DecodeFrontendFlight(benchmark::State& state) {
  std::string flight;
  hp::Encode(hp::Parse{"", kPgbenchSelect, {}}, flight);
  hp::Bind b = PgbenchBind();
  b.statement = "";
  hp::Encode(b, flight);
  hp::Encode(hp::Describe{hp::ObjectKind::kPortal, ""}, flight);
  hp::Encode(hp::Execute{"", 0}, flight);
  hp::Encode(hp::Sync{}, flight);
  hp::FrameReader reader(hp::FrameReader::Mode::kTagged);
  for (auto _ : state) {
    std::string_view rest = flight;
    for (;;) {
      hp::FrameReader::Result r = reader.Read(rest);
      if (!r.is_frame()) break;
      absl::StatusOr<hp::FrontendMessage> m = hp::DecodeFrontendMessage(r.frame());
      benchmark::DoNotOptimize(m);
      rest.remove_prefix(r.frame().size());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(flight.size()));
  state.SetItemsProcessed(int64_t(state.iterations()) * 5);
}
BENCHMARK(BM_DecodeFrontendFlight);

// The server's answer to that flight (ParseComplete, BindComplete,
// RowDescription, DataRow, CommandComplete, ReadyForQuery): split + typed
// decode of every message, as the Endpoint's release tracking would.
void BM_DecodeBackendFlight(benchmark::State& state) {
  std::string flight;
  hp::Encode(hp::ParseComplete{}, flight);
  hp::Encode(hp::BindComplete{}, flight);
  hp::RowDescription rd;
  rd.fields.push_back(hp::FieldDescription{"abalance", 16397, 3, 23, 4, -1, hp::kFormatText});
  hp::Encode(rd, flight);
  flight += NarrowRow();
  hp::Encode(hp::CommandComplete{"SELECT 1"}, flight);
  hp::Encode(hp::ReadyForQuery{hp::TransactionStatus::kIdle}, flight);
  hp::FrameReader reader(hp::FrameReader::Mode::kTagged);
  for (auto _ : state) {
    std::string_view rest = flight;
    for (;;) {
      hp::FrameReader::Result r = reader.Read(rest);
      if (!r.is_frame()) break;
      absl::StatusOr<hp::BackendMessage> m = hp::DecodeBackendMessage(r.frame());
      benchmark::DoNotOptimize(m);
      rest.remove_prefix(r.frame().size());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(flight.size()));
  state.SetItemsProcessed(int64_t(state.iterations()) * 6);
}
BENCHMARK(BM_DecodeBackendFlight);

}  // namespace

BENCHMARK_MAIN();
