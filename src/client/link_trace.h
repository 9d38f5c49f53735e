// A one-line summary of a message group the Client sends over the link, for
// the round-trip trace (HYPERPOOL_TRACE_LINK=1 on `hyperpool client` or
// `serve`: every flight is logged to stderr with why it left). Tracing is a
// measuring aid for the WAN round-trip budget (docs/performance.md, "Seed
// workload"); it is off unless the variable is set.
#ifndef HYPERPOOL_CLIENT_LINK_TRACE_H_
#define HYPERPOOL_CLIENT_LINK_TRACE_H_

#include <string>
#include <string_view>

namespace hyperpool::client {

// "P[stmt](select ...) D[S] H" for the frames at the start of `bytes`: tags,
// the statement name and the first characters of any SQL text; a partial
// frame at the end is shown as "+N bytes". `frontend` false: backend frames
// (answers made locally), shown as tags only.
std::string SummarizeFlight(std::string_view bytes, bool frontend = true);

// True if `bytes` holds a frame the Endpoint answers (Query, Sync,
// FunctionCall, Flush): a flight the app waits for, i.e. one WAN round trip.
// A lone Terminate is not one.
bool ExpectsAnswer(std::string_view bytes);

// True if HYPERPOOL_TRACE_LINK is set to a non-empty value other than "0".
bool LinkTraceEnabled();

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_LINK_TRACE_H_
