#include "client/link_ready.h"

#include "protocol/codec.h"

namespace hyperpool::client {

LinkReadyReader::Result LinkReadyReader::Read(std::string_view bytes, std::size_t* consumed) {
  for (;;) {
    protocol::FrameReader::Result r = reader_.Read(bytes.substr(pos_));
    if (r.is_need_more()) {
      *consumed = pos_;
      return Result::kNeedMore;
    }
    if (r.is_error()) {
      *consumed = pos_;
      return Result::kMalformed;
    }
    const protocol::Frame& f = r.frame();
    pos_ += f.size();
    *consumed = pos_;
    switch (f.tag) {
      case 'S':
        if (auto ps = protocol::DecodeParameterStatus(f.payload); ps.ok()) {
          params_.emplace_back(std::string(ps->name), std::string(ps->value));
        }
        break;
      case 'E':
        error_.assign(f.raw.data(), f.raw.size());
        return Result::kRefused;
      case 'Z':
        return Result::kReady;
      default:
        break;  // (nothing else belongs to link-ready; ignored as before)
    }
  }
}

}  // namespace hyperpool::client
