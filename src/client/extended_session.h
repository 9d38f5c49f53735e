// The extended-query protocol as the Client forwards it (docs/architecture.md,
// "Statement metadata at the Client"). Sans-I/O: the session hands it every
// frontend frame before sending and every backend frame (except link control
// messages) before writing to the app, and it says what to send, what to
// answer locally and what to forward.
//
// Frontend side (PostgreSQL docs, "Message Flow" > "Extended Query"):
//  - Parse + Describe(statement) + Flush|Sync, Parse + Flush|Sync: when the
//    store knows the statement's metadata (statement_metadata.h), the link
//    is idle and the session is outside a transaction, ParseComplete /
//    ParameterDescription / RowDescription|NoData (/ ReadyForQuery) are
//    answered at once and the Parse is *deferred*; a statement never seen
//    goes to the origin, so its errors appear where they appear directly.
//  - A deferred Parse is sent, declaring the parameter types the driver was
//    told, just before the first message that needs it (Bind, Describe,
//    a Parse of the same name); its ParseComplete is swallowed, and its
//    error (if any) reaches the driver at that message, after which the
//    metadata is dropped.
//  - The first Bind of a statement answered locally is checked: a
//    Describe(portal) is sent after it (or the driver's own is used) and the
//    origin's RowDescription compared with the promised one (format codes
//    aside). Equal: the BindComplete (held until then) is forwarded and the
//    Describe answer swallowed. Different (DDL the Endpoint did not see):
//    the driver gets ERROR 0A000 "cached plan must not change result type"
//    in place of the BindComplete, the rest of the unit's answers are
//    swallowed up to ReadyForQuery (as PostgreSQL skips to Sync) and the
//    metadata is dropped, so drivers that re-prepare recover as directly.
// Backend side: an ordered queue of what each forwarded message expects
// (as statement_session.h on the Endpoint); answers to Describe(statement)
// of statements the session parsed are stored. Anything it cannot match
// makes it "lost": from then on everything is forwarded verbatim and nothing
// is answered locally for the rest of the session.
#ifndef HYPERPOOL_CLIENT_EXTENDED_SESSION_H_
#define HYPERPOOL_CLIENT_EXTENDED_SESSION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/app_outbox.h"
#include "client/statement_metadata.h"
#include "common/small_fifo.h"
#include "protocol/frame_reader.h"

namespace hyperpool::client {

// What the session believes about one of its prepared statements.
struct SessionStatement {
  std::string sql;
  std::vector<uint32_t> param_types;
  std::string metadata_key;  // empty: the session's state cannot key it
  // Non-empty while the Parse is deferred: the 'P' frame to send.
  std::string deferred_parse;
  // What the driver was told locally; checked at the first Bind.
  std::shared_ptr<const StatementMetadata> promised;
  // The result type the driver holds for it (protocol::ResultTypeDigest of
  // the RowDescription / NoData it was shown: its Describe(statement)
  // answer, else the first Describe(portal) answer of a portal bound to
  // it), 0 while unknown. Part of the Client tier's key for a unit that
  // Binds it (cache::CandidateUnit::result_type).
  uint64_t result_type = 0;
  // Tells this statement from a later one of the same name (answers to
  // messages sent before a re-Parse are not about it).
  uint32_t serial = 0;
  // The driver was shown `promised`'s RowDescription (a Describe of the
  // statement answered here): only then is a different shape at the first
  // Bind an error (0A000). A driver that was only told ParseComplete
  // learns the shape from the origin, as directly, whatever DDL happened.
  bool shown = false;
};

// protocol::ResultTypeDigest of a whole RowDescription ('T') or NoData
// ('n') frame; 0 for anything else.
uint64_t ResultTypeOfFrame(std::string_view frame);
// The result type of a stored extended answer (`frames`: its first
// RowDescription or NoData, which every Client-tier entry of an extended
// unit holds); 0 when there is none before the rows.
uint64_t ResultTypeOfAnswer(std::string_view frames);

// Whether local answers are allowed for the frame at hand.
struct ExtendedContext {
  bool keyable = false;      // the session's name resolution can be keyed (no SET, no search_path ...)
  char txn_status = 'I';     // from the latest ReadyForQuery
  bool nothing_sent = true;  // nothing of this batch has been queued for the link before this frame
  // The frame belongs to a cache candidate whose driver sent no Describe:
  // a Bind gets a Describe(portal) whose answer is swallowed, so that what
  // is stored always holds the RowDescription (one entry serves units with
  // and without a Describe(portal)).
  bool describe_portal = false;
};

// Encodes "cached plan must not change result type" as PostgreSQL reports it
// (SQLSTATE 0A000, routine RevalidateCachedQuery: asyncpg keys on it).
void AppendCachedPlanChanged(std::string& out);

// True if two RowDescription ('T') or NoData ('n') frames describe the same
// result type (protocol::SameResultType: names, types, sizes, modifiers; not
// the table OIDs and attribute numbers, which a table dropped and re-created
// with the same columns changes, nor the format codes the Bind asked for).
bool SameRowShape(std::string_view a, std::string_view b);

class ExtendedSession {
 public:
  ExtendedSession(StatementMetadataStore* store, std::string database, std::string hello_fingerprint);

  // One frontend frame `frame`; `rest` holds the frames after it that have
  // arrived (whole or not). Appends what to send to `to_link` and what to
  // answer at once to `local`. Returns the bytes of `rest` it also consumed
  // (frames it answered together with this one).
  struct FrontendResult {
    size_t rest_consumed = 0;
    bool forwarded = true;  // `frame` (or a rewrite of it) was queued for the link
  };
  FrontendResult OnFrontend(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx,
                            std::string& to_link, std::string& local);

  // One backend frame (tag, whole raw frame) from the link; appends what
  // the app gets to `out` (app_outbox.h: a frame passed on as it came is
  // not copied when `raw` lies in the buffer `out` was made for).
  void OnBackend(char tag, std::string_view raw, AppBytes& out);
  void OnBackend(char tag, std::string_view raw, std::string& out) {
    AppBytes bytes(out);
    OnBackend(tag, raw, bytes);
  }
  // A partial DataRow may stream to the app as it arrives (it is not being
  // swallowed).
  bool StreamsRows() const;

  // The statement `name` as the session knows it, or nullptr.
  const SessionStatement* Find(std::string_view name) const;
  // What the metadata store would promise for a Parse of `sql` with
  // `types` (what a unit answered here with that Parse deferred tells the
  // driver): its key and metadata, the metadata null when the store does
  // not know the statement (or the session's state cannot key it).
  struct Promise {
    std::string key;
    std::shared_ptr<const StatementMetadata> meta;
  };
  Promise Promised(std::string_view sql, const std::vector<uint32_t>& types, bool keyable) const;
  // A unit answered from the Client tier contained Parse `frame`, whose
  // Promised() the caller looked up: the statement now exists for the
  // driver. False (serve nothing) when its metadata is unknown: then the
  // Parse could not be deferred safely.
  bool AdoptServedParse(const protocol::Frame& frame, Promise promise);

  // The session's fingerprint changed (its own SETs of ordinary settings).
  void set_fingerprint(std::string fingerprint) { hello_fp_ = std::move(fingerprint); }

  bool lost() const { return lost_; }
  // Holds nothing a new ExtendedSession (same store, database and
  // fingerprint) would not: no statement of the driver's, nothing
  // forwarded or held, no check or learning under way. Dropping it and
  // making it again later changes nothing the driver could see
  // (ClientCore::ReleaseIdleState).
  bool Disposable() const;
  // Nothing forwarded is waiting for an answer.
  bool idle() const { return pending_.empty() && !skipping_ && !swallow_to_ready_; }
  // An extended message went to the link since the last Sync or Query: the
  // origin is inside the implicit transaction it began (holding its locks),
  // which only a Sync that reaches it ends. Nothing may be answered locally
  // meanwhile (a unit may still be a cache candidate: its result is stored).
  bool unsynced() const { return unsynced_; }
  // The driver's unnamed statement exists (forwarded, or deferred): a
  // simple Query destroys it, so one answered locally would leave it to a
  // later Bind('') that must fail (ClientCore::ServeLocalHit).
  bool holds_unnamed() const { return statements_.contains(std::string()); }
  // Queries and FunctionCalls sent that the origin skipped (an extended
  // message before them failed): they get no ReadyForQuery. Reading clears it.
  size_t TakeSkippedUnits() { return std::exchange(skipped_units_, 0); }

 private:
  enum class Expect : uint8_t {
    kParse,
    kBind,
    kDescribeStatement,
    kDescribePortal,
    kExecute,
    kClose,
    kSync,
    kQuery,  // simple Query or FunctionCall: everything up to ReadyForQuery
  };
  struct Pending {
    Expect kind = Expect::kSync;
    bool swallow = false;  // sent by us: its answer is not the driver's
    bool hold = false;     // Bind whose BindComplete waits for the check
    bool learn = false;    // Describe: its answer tells `name`'s result type (SessionStatement::result_type)
    uint32_t serial = 0;   // with `learn`: the statement's SessionStatement::serial
    std::string key;       // metadata key (learn / drop)
    std::string name;      // deferred Parse: the statement, and
    std::string parse;     // its frame, to defer again if the origin skips it
    std::string sql;       // Describe(statement): the text, for IsDeferrable
    uint64_t generation = 0;
    std::string param_desc;  // Describe(statement): the 't' seen so far
    std::shared_ptr<const StatementMetadata> check;  // Describe(portal): the promised shape
  };

  // OnFrontend for Parse, Describe and Bind; false if the frame does not
  // decode (then it is forwarded for the origin to reject).
  FrontendResult Dispatch(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx,
                          std::string& to_link, std::string& local);
  bool OnParse(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx, std::string& to_link,
               std::string& local, FrontendResult& result);
  bool OnDescribe(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx,
                  std::string& to_link, std::string& local, FrontendResult& result);
  bool OnBind(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx, std::string& to_link,
              std::string& local, FrontendResult& result);
  void Push(Pending&& p);
  // A Pending of `kind` and nothing else, made in place (no move of the
  // 192-byte entry).
  void Push(Expect kind) { pending_.emplace_back().kind = kind; }
  // Records `st` under `name`, with a new serial.
  SessionStatement& Define(const std::string& name, SessionStatement st);
  // A Describe answer (`frame`) for a Pending with `learn`.
  void Learn(const Pending& p, std::string_view frame, bool overwrite);
  void Materialize(SessionStatement& st, std::string& to_link);
  // Materializes every named statement answered here if `sql` is a SQL EXECUTE.
  void MaterializeForExecute(std::string_view sql, std::string& to_link);
  void OnError(std::string_view raw, AppBytes& out);
  void Lose(std::string_view raw, AppBytes& out);
  std::string KeyFor(std::string_view sql, const std::vector<uint32_t>& types, bool keyable) const;
  bool CanAnswer(const ExtendedContext& ctx) const;

  StatementMetadataStore* store_;
  std::string database_;
  std::string hello_fp_;
  std::unordered_map<std::string, SessionStatement> statements_;
  SmallFifo<Pending> pending_;
  std::string held_;                 // a BindComplete waiting for its check
  bool skipping_ = false;            // the origin skips to a Sync not yet sent (an error was seen)
  size_t skipped_units_ = 0;         // TakeSkippedUnits()
  bool swallow_to_ready_ = false;    // 0A000 was reported: swallow up to ReadyForQuery
  bool lost_ = false;
  bool unsynced_ = false;            // an extended message went to the link since the last Sync / Query
  std::string check_portal_;         // the driver's own Describe(portal) of this name is the check
  std::shared_ptr<const StatementMetadata> check_promise_;
  std::string check_key_;
  std::string check_statement_;
  // A Bind was followed by the driver's own Describe of its portal: that
  // Describe's answer tells check_statement_'s result type.
  bool describe_learns_ = false;
  uint32_t next_serial_ = 0;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_EXTENDED_SESSION_H_
