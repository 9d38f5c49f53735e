// AppOutbox and AppBytes (src/client/app_outbox.h): what the Client queues
// for the app leaves in order, partly written strings resume where they
// stopped, and frames passed on unchanged are not copied.

#include "client/app_outbox.h"

#include <string>
#include <string_view>

#include <catch2/catch_test_macros.hpp>

namespace hyperpool::client {
namespace {

// What a write of at most `limit` bytes would send: the gathered buffers
// concatenated and cut.
std::string WriteSome(AppOutbox& out, size_t limit) {
  AppOutbox::Buffers buffers;
  const size_t count = out.Gather(buffers);
  std::string written;
  for (size_t i = 0; i < count && written.size() < limit; ++i) {
    const std::string_view b(static_cast<const char*>(buffers[i].data()), buffers[i].size());
    written.append(b.substr(0, limit - written.size()));
  }
  out.Consume(written.size());
  return written;
}

TEST_CASE("the outbox writes what was queued, in order, across partial writes") {
  AppOutbox out;
  REQUIRE(out.empty());
  out.Push("hit-answer;");
  out.Push("");  // nothing queued for an empty string
  out.Push("link-bytes;");
  out.Push("error");
  std::string all;
  for (size_t limit : {3, 9, 1, 100}) all += WriteSome(out, limit);
  CHECK(all == "hit-answer;link-bytes;error");
  CHECK(out.empty());
}

TEST_CASE("the idle sweep's release keeps whatever is still queued") {
  AppOutbox out;
  out.Push("first;");
  out.Push("second");
  CHECK(WriteSome(out, 3) == "fir");
  out.ReleaseIfEmpty();  // not empty: nothing is dropped, the offset holds
  CHECK(WriteSome(out, 100) == "st;second");
  REQUIRE(out.empty());
  out.ReleaseIfEmpty();  // empty: its storage goes, and it queues again after
  out.Push("again");
  CHECK(WriteSome(out, 100) == "again");
}

TEST_CASE("the outbox gathers at most kMaxGather strings per write and keeps the rest") {
  AppOutbox out;
  std::string expected;
  for (int i = 0; i < 40; ++i) {
    std::string s(static_cast<size_t>(i + 1), static_cast<char>('a' + i % 26));
    expected += s;
    out.Push(std::move(s));
  }
  AppOutbox::Buffers buffers;
  CHECK(out.Gather(buffers) == AppOutbox::kMaxGather);
  std::string all;
  while (!out.empty()) all += WriteSome(out, 50);
  CHECK(all == expected);
  // Strings queued after a partial write follow the rest of it.
  out.Push("abcdef");
  CHECK(WriteSome(out, 2) == "ab");
  out.Push("gh");
  CHECK(WriteSome(out, 100) == "cdefgh");
  out.Push("x");
  out.Clear();
  CHECK(out.empty());
}

TEST_CASE("AppBytes counts frames passed on unchanged without copying them") {
  const std::string buf = "frame1frame2frame3";
  std::string copy;
  AppBytes out(buf, copy);
  CHECK(out.empty());
  out += std::string_view(buf).substr(0, 6);
  out.Append(std::string_view(buf).substr(6, 6));
  CHECK(out.verbatim());
  CHECK(out.verbatim_size() == 12);
  CHECK(copy.empty());
  CHECK(!out.empty());
}

TEST_CASE("AppBytes passes frames on around the ones left out, without copying them") {
  const std::string buf = "frame1frame2frame3frame4frame5";
  std::string copy;
  AppBytes out(buf, copy);
  out += std::string_view(buf).substr(6, 6);   // frame1 swallowed (a control before the result)
  out += std::string_view(buf).substr(12, 6);
  out += std::string_view(buf).substr(24, 6);  // frame4 swallowed
  CHECK(out.verbatim());
  CHECK(copy.empty());
  CHECK(out.verbatim_size() == 18);
  CHECK(out.verbatim_end() == 30);
  CHECK(out.Gathered() == "frame2frame3frame5");
  std::string chunk = buf;  // the buffer itself, as the session moves it
  out.CompactTo(chunk);
  CHECK(chunk == "frame2frame3frame5");
  SECTION("an encoder appends after a hole: the ranges are copied, in order") {
    out.owned() += "E...";
    CHECK(!out.verbatim());
    CHECK(copy == "frame2frame3frame5E...");
  }
}

TEST_CASE("AppBytes copies from the first frame changed, added, out of order or past its ranges") {
  const std::string buf = "frame1frame2frame3";
  SECTION("a frame out of order") {
    std::string copy;
    AppBytes out(buf, copy);
    out += std::string_view(buf).substr(12, 6);
    out += std::string_view(buf).substr(0, 6);
    CHECK(!out.verbatim());
    CHECK(copy == "frame3frame1");
  }
  SECTION("more holes than ranges") {
    const std::string many = "aAbBcCdDeE";
    std::string copy;
    AppBytes out(many, copy);
    for (size_t i = 0; i < many.size(); i += 2) out += std::string_view(many).substr(i, 1);  // every capital left out
    CHECK(!out.verbatim());
    CHECK(copy == "abcde");
  }
  SECTION("a frame that runs past the buffer's end") {
    std::string copy;
    AppBytes out(std::string_view(buf).substr(0, 12), copy);
    out += std::string_view(buf).substr(6, 12);
    CHECK(!out.verbatim());
    CHECK(copy == "frame2frame3");
  }
  SECTION("bytes from elsewhere, equal or not") {
    std::string copy;
    AppBytes out(buf, copy);
    const std::string held = "frame1";  // the same bytes, another place
    out += held;
    CHECK(!out.verbatim());
    out += std::string_view(buf).substr(0, 6);
    CHECK(copy == "frame1frame1");
  }
  SECTION("an encoder appends") {
    std::string copy;
    AppBytes out(buf, copy);
    out += std::string_view(buf).substr(0, 12);
    out.owned() += "E...";
    CHECK(copy == "frame1frame2E...");
  }
  SECTION("a string-only AppBytes always appends") {
    std::string target = "x";
    AppBytes out(target);
    out += std::string_view(buf).substr(0, 6);
    CHECK(target == "xframe1");
    CHECK(!out.verbatim());
  }
}

}  // namespace
}  // namespace hyperpool::client
