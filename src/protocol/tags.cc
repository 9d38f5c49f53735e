#include "protocol/tags.h"

namespace hyperpool::protocol {

std::string_view FrontendTagName(FrontendTag tag) {
  switch (tag) {
    case FrontendTag::kBind: return "Bind";
    case FrontendTag::kClose: return "Close";
    case FrontendTag::kCopyData: return "CopyData";
    case FrontendTag::kCopyDone: return "CopyDone";
    case FrontendTag::kCopyFail: return "CopyFail";
    case FrontendTag::kDescribe: return "Describe";
    case FrontendTag::kExecute: return "Execute";
    case FrontendTag::kFlush: return "Flush";
    case FrontendTag::kFunctionCall: return "FunctionCall";
    case FrontendTag::kParse: return "Parse";
    case FrontendTag::kPassword: return "PasswordMessage";
    case FrontendTag::kQuery: return "Query";
    case FrontendTag::kSync: return "Sync";
    case FrontendTag::kTerminate: return "Terminate";
  }
  return "unknown";
}

std::string_view BackendTagName(BackendTag tag) {
  switch (tag) {
    case BackendTag::kAuthentication: return "Authentication";
    case BackendTag::kBackendKeyData: return "BackendKeyData";
    case BackendTag::kBindComplete: return "BindComplete";
    case BackendTag::kCloseComplete: return "CloseComplete";
    case BackendTag::kCommandComplete: return "CommandComplete";
    case BackendTag::kCopyBothResponse: return "CopyBothResponse";
    case BackendTag::kCopyData: return "CopyData";
    case BackendTag::kCopyDone: return "CopyDone";
    case BackendTag::kCopyInResponse: return "CopyInResponse";
    case BackendTag::kCopyOutResponse: return "CopyOutResponse";
    case BackendTag::kDataRow: return "DataRow";
    case BackendTag::kEmptyQueryResponse: return "EmptyQueryResponse";
    case BackendTag::kErrorResponse: return "ErrorResponse";
    case BackendTag::kFunctionCallResponse: return "FunctionCallResponse";
    case BackendTag::kNegotiateProtocolVersion: return "NegotiateProtocolVersion";
    case BackendTag::kNoData: return "NoData";
    case BackendTag::kNoticeResponse: return "NoticeResponse";
    case BackendTag::kNotificationResponse: return "NotificationResponse";
    case BackendTag::kParameterDescription: return "ParameterDescription";
    case BackendTag::kParameterStatus: return "ParameterStatus";
    case BackendTag::kParseComplete: return "ParseComplete";
    case BackendTag::kPortalSuspended: return "PortalSuspended";
    case BackendTag::kReadyForQuery: return "ReadyForQuery";
    case BackendTag::kRowDescription: return "RowDescription";
  }
  return "unknown";
}

bool IsFrontendTag(char tag) {
  return FrontendTagName(static_cast<FrontendTag>(tag)) != "unknown";
}

bool IsBackendTag(char tag) {
  return BackendTagName(static_cast<BackendTag>(tag)) != "unknown";
}

}  // namespace hyperpool::protocol
