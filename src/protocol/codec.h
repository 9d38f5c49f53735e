// Umbrella header for the PostgreSQL v3 wire codec (no I/O).
#ifndef HYPERPOOL_PROTOCOL_CODEC_H_
#define HYPERPOOL_PROTOCOL_CODEC_H_

#include "protocol/backend_messages.h"    // IWYU pragma: export
#include "protocol/common_messages.h"     // IWYU pragma: export
#include "protocol/frame_reader.h"        // IWYU pragma: export
#include "protocol/frontend_messages.h"   // IWYU pragma: export
#include "protocol/pooler_errors.h"       // IWYU pragma: export
#include "protocol/protocol_error.h"      // IWYU pragma: export
#include "protocol/tags.h"                // IWYU pragma: export
#include "protocol/wire_reader.h"         // IWYU pragma: export
#include "protocol/wire_writer.h"         // IWYU pragma: export

#endif  // HYPERPOOL_PROTOCOL_CODEC_H_
