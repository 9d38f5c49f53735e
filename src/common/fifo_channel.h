// Asio's channel traits with a SmallFifo (common/small_fifo.h) for the
// channel's buffer: the default std::deque allocates its map and a 512-byte
// node when the channel is made, used or not, and every session holds
// several channels (its link's two, its signals).
#ifndef HYPERPOOL_COMMON_FIFO_CHANNEL_H_
#define HYPERPOOL_COMMON_FIFO_CHANNEL_H_

#include <asio/experimental/channel_traits.hpp>

#include "common/small_fifo.h"

namespace hyperpool {

template <typename... Signatures>
struct FifoChannelTraits : asio::experimental::channel_traits<Signatures...> {
  template <typename... NewSignatures>
  struct rebind {
    using other = FifoChannelTraits<NewSignatures...>;
  };
  template <typename Element>
  struct container {
    using type = SmallFifo<Element>;
  };
};

}  // namespace hyperpool

#endif  // HYPERPOOL_COMMON_FIFO_CHANNEL_H_
