// The Endpoint's first answer on a link (docs/architecture.md, "The link
// protocol", 2: link-ready): the origin's ParameterStatus messages, then
// ReadyForQuery('I'); or an ErrorResponse when the Endpoint cannot serve.
// A sans-I/O reader of it, shared by the Client's parameter probe and a
// session's forwarding leg: bytes in, a verdict out.
#ifndef HYPERPOOL_CLIENT_LINK_READY_H_
#define HYPERPOOL_CLIENT_LINK_READY_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "client/client_util.h"
#include "protocol/frame_reader.h"

namespace hyperpool::client {

class LinkReadyReader {
 public:
  enum class Result {
    kNeedMore,  // feed more bytes
    kReady,     // ReadyForQuery: params() are the origin's
    kRefused,   // an ErrorResponse: error() is its frame, the Endpoint's answer for the app
    kMalformed, // not PostgreSQL messages
  };

  // Reads link-ready from the start of `bytes`; `*consumed` is how much of
  // it belongs to link-ready (what follows is the session's). Call again
  // with more bytes (the same prefix included) after kNeedMore.
  Result Read(std::string_view bytes, std::size_t* consumed);

  const ParamList& params() const { return params_; }
  ParamList TakeParams() { return std::move(params_); }
  const std::string& error() const { return error_; }

 private:
  protocol::FrameReader reader_{protocol::FrameReader::Mode::kTagged};
  std::size_t pos_ = 0;  // bytes already read as whole frames
  ParamList params_;
  std::string error_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_LINK_READY_H_
