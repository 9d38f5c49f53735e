#include "protocol/auth/scram.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <string>
#include <vector>

#include "protocol/auth/auth_util.h"

namespace hyperpool::auth {
namespace {

// RFC 7677 section 3.
constexpr std::string_view kRfcClientNonce = "rOprNGfwEbeRWgbNEkqO";
constexpr std::string_view kRfcServerNonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
constexpr std::string_view kRfcClientFirst = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
constexpr std::string_view kRfcServerFirst =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
constexpr std::string_view kRfcClientFinal =
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
constexpr std::string_view kRfcServerFinal = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
// The same verifier in pg_authid form, computed with Python's hashlib.
constexpr std::string_view kRfcStored =
    "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
    "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";

ScramVerifier RfcVerifier() {
  auto salt = Base64Decode("W22ZaJ0SNY7soEsUEjb6gQ==");
  auto v = MakeScramVerifier("pencil", *salt, 4096);
  REQUIRE(v.ok());
  return *v;
}

// A cheap verifier for tests that do not care about the RFC numbers.
ScramVerifier CheapVerifier(std::string_view password = "secret") {
  auto v = MakeScramVerifier(password, "saltsalt", 2);
  REQUIRE(v.ok());
  return *v;
}

ScramClient MakeClient(ScramClient::Options o) {
  auto c = ScramClient::Create(std::move(o));
  REQUIRE(c.ok());
  return std::move(*c);
}

ScramServer MakeServer(ScramServer::Options o) {
  auto s = ScramServer::Create(std::move(o));
  REQUIRE(s.ok());
  return std::move(*s);
}

TEST_CASE("RFC 7677 example: client role") {
  ScramClient c = MakeClient({.password = "pencil", .username = "user", .client_nonce = std::string(kRfcClientNonce)});
  CHECK(c.mechanism() == kScramSha256);
  CHECK(c.ClientFirstMessage() == kRfcClientFirst);
  auto final_msg = c.HandleServerFirst(kRfcServerFirst);
  REQUIRE(final_msg.ok());
  CHECK(*final_msg == kRfcClientFinal);
  CHECK(c.HandleServerFinal(kRfcServerFinal).ok());
  CHECK(c.state() == ScramClient::State::kDone);
}

TEST_CASE("RFC 7677 example: server role") {
  ScramServer s = MakeServer({.verifier = RfcVerifier(), .server_nonce = std::string(kRfcServerNonce)});
  CHECK(s.AdvertisedMechanisms() == std::vector<std::string_view>{kScramSha256});
  auto server_first = s.HandleClientFirst(kScramSha256, kRfcClientFirst);
  REQUIRE(server_first.ok());
  CHECK(*server_first == kRfcServerFirst);
  CHECK(s.username() == "user");
  auto server_final = s.HandleClientFinal(kRfcClientFinal);
  REQUIRE(server_final.ok());
  CHECK(*server_final == kRfcServerFinal);
  CHECK(s.state() == ScramServer::State::kDone);
}

TEST_CASE("RFC 7677 verifier formats and parses in PostgreSQL's stored form") {
  CHECK(FormatScramVerifier(RfcVerifier()) == kRfcStored);
  auto parsed = ParseScramVerifier(kRfcStored);
  REQUIRE(parsed.ok());
  CHECK(parsed->iterations == 4096);
  CHECK(FormatScramVerifier(*parsed) == kRfcStored);
  CHECK(VerifyScramPassword(*parsed, "pencil"));
  CHECK_FALSE(VerifyScramPassword(*parsed, "pencil2"));
}

TEST_CASE("ParseScramVerifier rejects malformed stored forms") {
  auto [stored, code] = GENERATE(table<std::string, absl::StatusCode>({
      {"", absl::StatusCode::kInvalidArgument},
      {"md53175bce1d3201d16594cebf9d7eb3f9d", absl::StatusCode::kInvalidArgument},
      {"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==", absl::StatusCode::kInvalidArgument},
      {"SCRAM-SHA-256$4096W22ZaJ0SNY7soEsUEjb6gQ==$a:b", absl::StatusCode::kInvalidArgument},
      {"SCRAM-SHA-256$0:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
       "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
       absl::StatusCode::kInvalidArgument},
      {"SCRAM-SHA-256$99999999999:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
       "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
       absl::StatusCode::kOutOfRange},
      {"SCRAM-SHA-256$4096:$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
       absl::StatusCode::kInvalidArgument},
      {"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$AAAA:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
       absl::StatusCode::kInvalidArgument},
      {"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=",
       absl::StatusCode::kInvalidArgument},
  }));
  CAPTURE(stored);
  CHECK(ParseScramVerifier(stored).status().code() == code);
}

TEST_CASE("Client and server agree with random nonces") {
  auto binding = GENERATE(ChannelBinding::kNone, ChannelBinding::kClientSupported, ChannelBinding::kTlsServerEndPoint);
  const bool plus = binding == ChannelBinding::kTlsServerEndPoint;
  ScramClient c = MakeClient({.password = "secret", .binding = binding, .cert_hash = plus ? "certhash" : ""});
  ScramServer s = MakeServer({.verifier = CheapVerifier(), .cert_hash = plus ? "certhash" : ""});
  auto server_first = s.HandleClientFirst(c.mechanism(), c.ClientFirstMessage());
  REQUIRE(server_first.ok());
  auto client_final = c.HandleServerFirst(*server_first);
  REQUIRE(client_final.ok());
  auto server_final = s.HandleClientFinal(*client_final);
  REQUIRE(server_final.ok());
  CHECK(c.HandleServerFinal(*server_final).ok());
  CHECK(s.username().empty());
  CHECK(c.ClientFirstMessage().substr(0, 6) == (plus ? "p=tls-" : binding == ChannelBinding::kNone ? "n,,n=," : "y,,n=,"));
}

TEST_CASE("Wrong password is Unauthenticated on the server") {
  ScramClient c = MakeClient({.password = "wrong"});
  ScramServer s = MakeServer({.verifier = CheapVerifier("secret")});
  auto server_first = s.HandleClientFirst(c.mechanism(), c.ClientFirstMessage());
  REQUIRE(server_first.ok());
  auto client_final = c.HandleServerFirst(*server_first);
  REQUIRE(client_final.ok());
  CHECK(s.HandleClientFinal(*client_final).status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(s.state() == ScramServer::State::kFailed);
}

TEST_CASE("A server that does not know the password fails the client's signature check") {
  ScramClient c = MakeClient({.password = "secret"});
  ScramServer impostor = MakeServer({.verifier = CheapVerifier("other")});
  auto server_first = impostor.HandleClientFirst(c.mechanism(), c.ClientFirstMessage());
  REQUIRE(server_first.ok());
  auto client_final = c.HandleServerFirst(*server_first);
  REQUIRE(client_final.ok());
  // An impostor cannot produce a valid v=; any well-formed one must fail.
  CHECK(c.HandleServerFinal("v=" + Base64Encode(std::string(32, 'x'))).code() == absl::StatusCode::kUnauthenticated);
  CHECK(c.state() == ScramClient::State::kFailed);
}

TEST_CASE("always_fail (unknown user) fails even with the right password") {
  ScramVerifier mock = MakeMockScramVerifier("nobody", "instance-secret");
  CHECK(mock.salt == MakeMockScramVerifier("nobody", "instance-secret").salt);  // stable per user
  CHECK(mock.salt != MakeMockScramVerifier("somebody", "instance-secret").salt);
  ScramVerifier real = CheapVerifier("secret");
  ScramClient c = MakeClient({.password = "secret"});
  ScramServer s = MakeServer({.verifier = real, .always_fail = true});
  auto server_first = s.HandleClientFirst(c.mechanism(), c.ClientFirstMessage());
  REQUIRE(server_first.ok());
  auto client_final = c.HandleServerFirst(*server_first);
  REQUIRE(client_final.ok());
  CHECK(s.HandleClientFinal(*client_final).status().code() == absl::StatusCode::kUnauthenticated);
}

TEST_CASE("Tampered client-final is rejected with the specific error") {
  ScramClient c = MakeClient({.password = "secret", .client_nonce = "abc"});
  ScramServer s = MakeServer({.verifier = CheapVerifier(), .server_nonce = "XYZ"});
  auto server_first = s.HandleClientFirst(kScramSha256, c.ClientFirstMessage());
  REQUIRE(server_first.ok());
  auto good = c.HandleServerFirst(*server_first);
  REQUIRE(good.ok());
  const std::string proof = good->substr(good->find(",p=") + 3);
  std::string flipped = proof;
  flipped[0] = flipped[0] == 'A' ? 'B' : 'A';
  const std::string zero_proof = Base64Encode(std::string(32, '\0'));

  auto [client_final, code] = GENERATE_COPY(table<std::string, absl::StatusCode>({
      {"", absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ", absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,p=" + flipped, absl::StatusCode::kUnauthenticated},
      {"c=biws,r=abcXYZ,p=" + zero_proof, absl::StatusCode::kUnauthenticated},
      {"c=eSws,r=abcXYZ,p=" + proof, absl::StatusCode::kPermissionDenied},   // "y,," instead of "n,,"
      {"c=" + Base64Encode("n,,junk") + ",r=abcXYZ,p=" + proof, absl::StatusCode::kPermissionDenied},
      {"c=biw,r=abcXYZ,p=" + proof, absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXY,p=" + proof, absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZW,p=" + proof, absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,p=AAAA", absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,p=", absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,p=" + proof.substr(1), absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,m=ext,p=" + proof, absl::StatusCode::kUnimplemented},
      {"c=biws,r=abcXYZ,junk,p=" + proof, absl::StatusCode::kInvalidArgument},
      {"r=abcXYZ,c=biws,p=" + proof, absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,p=" + proof + ",x=y", absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,x=y,p=" + proof, absl::StatusCode::kUnauthenticated},  // extension is signed
      {"c=biws,r=abcXYZ,p=" + proof + std::string(1, '\0'), absl::StatusCode::kInvalidArgument},
      {"c=biws,r=abcXYZ,p=" + proof + std::string(5000, 'A'), absl::StatusCode::kOutOfRange},
  }));
  CAPTURE(client_final);
  ScramServer fresh = MakeServer({.verifier = CheapVerifier(), .server_nonce = "XYZ"});
  REQUIRE(fresh.HandleClientFirst(kScramSha256, c.ClientFirstMessage()).ok());
  CHECK(fresh.HandleClientFinal(client_final).status().code() == code);
  CHECK(fresh.state() == ScramServer::State::kFailed);
  // And the untampered message is still accepted by the same setup.
  ScramServer again = MakeServer({.verifier = CheapVerifier(), .server_nonce = "XYZ"});
  REQUIRE(again.HandleClientFirst(kScramSha256, c.ClientFirstMessage()).ok());
  CHECK(again.HandleClientFinal(*good).ok());
}

TEST_CASE("Malformed client-first is rejected with the specific error") {
  struct Case {
    std::string mechanism;
    bool tls;  // server has a cert hash and advertises -PLUS
    std::string message;
    absl::StatusCode code;
  };
  const std::string S(kScramSha256);
  const std::string P(kScramSha256Plus);
  auto c = GENERATE_COPY(values<Case>({
      {S, false, "", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=,r=", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=", absl::StatusCode::kInvalidArgument},
      {S, false, "x,,n=,r=abc", absl::StatusCode::kInvalidArgument},
      {S, false, "n,a=bob,n=,r=abc", absl::StatusCode::kUnimplemented},
      {S, false, "n,zz,n=,r=abc", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,m=foo,n=,r=abc", absl::StatusCode::kUnimplemented},
      {S, false, "n,,r=abc,n=", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=a=ZZ,r=abc", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=a=3,r=abc", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=,r=abc,m=x", absl::StatusCode::kUnimplemented},
      {S, false, "n,,n=,r=abc,junk", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=,r=a\x7f", absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=,r=a\x80", absl::StatusCode::kInvalidArgument},
      {S, false, std::string("n,,n=,r=a\0b", 11), absl::StatusCode::kInvalidArgument},
      {S, false, "n,,n=,r=" + std::string(513, 'a'), absl::StatusCode::kOutOfRange},
      {S, false, "n,,n=,r=abc," + std::string(5000, 'x'), absl::StatusCode::kOutOfRange},
      {S, false, "p=tls-server-end-point,,n=,r=abc", absl::StatusCode::kPermissionDenied},
      {P, false, "p=tls-server-end-point,,n=,r=abc", absl::StatusCode::kInvalidArgument},
      {P, false, "n,,n=,r=abc", absl::StatusCode::kInvalidArgument},
      {"SCRAM-SHA-1", false, "n,,n=,r=abc", absl::StatusCode::kInvalidArgument},
      {S, true, "y,,n=,r=abc", absl::StatusCode::kPermissionDenied},  // downgrade
      {P, true, "n,,n=,r=abc", absl::StatusCode::kPermissionDenied},
      {P, true, "y,,n=,r=abc", absl::StatusCode::kPermissionDenied},
      {P, true, "p=tls-unique,,n=,r=abc", absl::StatusCode::kUnimplemented},
      {S, true, "p=tls-server-end-point,,n=,r=abc", absl::StatusCode::kPermissionDenied},
      // Accepted cases (code kOk), to pin down what is allowed:
      {S, true, "n,,n=,r=abc", absl::StatusCode::kOk},  // client without binding support
      {S, false, "y,,n=,r=abc", absl::StatusCode::kOk},
      {S, false, "n,,n=a=3Db=2C,r=abc,x=ext", absl::StatusCode::kOk},
      {P, true, "p=tls-server-end-point,,n=,r=abc", absl::StatusCode::kOk},
  }));
  CAPTURE(c.mechanism, c.tls, c.message);
  ScramServer s = MakeServer({.verifier = CheapVerifier(), .cert_hash = c.tls ? "hash" : ""});
  auto r = s.HandleClientFirst(c.mechanism, c.message);
  CHECK(r.status().code() == c.code);
  CHECK(s.state() == (c.code == absl::StatusCode::kOk ? ScramServer::State::kAwaitingClientFinal
                                                      : ScramServer::State::kFailed));
}

TEST_CASE("Username escaping round-trips through client-first") {
  ScramClient c = MakeClient({.password = "p", .username = "a=b,c"});
  CHECK(c.ClientFirstMessage().find("n=a=3Db=2Cc,") != std::string::npos);
  ScramServer s = MakeServer({.verifier = CheapVerifier()});
  REQUIRE(s.HandleClientFirst(kScramSha256, c.ClientFirstMessage()).ok());
  CHECK(s.username() == "a=b,c");
}

TEST_CASE("Malformed server-first is rejected with the specific error") {
  const std::string b64_300 = Base64Encode(std::string(300, 's'));
  auto [server_first, code] = GENERATE_COPY(table<std::string, absl::StatusCode>({
      {"", absl::StatusCode::kInvalidArgument},
      {"r=fixedX", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD", absl::StatusCode::kInvalidArgument},
      {"m=ext,r=fixedX,s=QUJD,i=1", absl::StatusCode::kUnimplemented},
      {"m=ext", absl::StatusCode::kUnimplemented},
      {"r=other,s=QUJD,i=1", absl::StatusCode::kInvalidArgument},
      {"r=fixed,s=QUJD,i=1", absl::StatusCode::kInvalidArgument},    // no server part
      {"r=fixeX,s=QUJD,i=1", absl::StatusCode::kInvalidArgument},
      {"r=,s=QUJD,i=1", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJ,i=1", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJ=,i=1", absl::StatusCode::kInvalidArgument},   // non-canonical
      {"r=fixedX,s=,i=1", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=" + b64_300 + ",i=1", absl::StatusCode::kOutOfRange},
      {"r=fixedX,s=QUJD,i=0", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=01", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=-1", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=+1", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=1x", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=1000001", absl::StatusCode::kOutOfRange},
      {"r=fixedX,s=QUJD,i=4294967296", absl::StatusCode::kOutOfRange},
      {"r=fixedX,s=QUJD,i=99999999999999999999999", absl::StatusCode::kOutOfRange},
      {"r=fixedX,s=QUJD,i=1,m=x", absl::StatusCode::kUnimplemented},
      {"r=fixedX,s=QUJD,i=1,junk", absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=1,", absl::StatusCode::kInvalidArgument},
      {"s=QUJD,r=fixedX,i=1", absl::StatusCode::kInvalidArgument},
      {"r=fixed" + std::string(600, 'X') + ",s=QUJD,i=1", absl::StatusCode::kOutOfRange},
      {"r=fixed" + std::string(5000, 'X') + ",s=QUJD,i=1", absl::StatusCode::kOutOfRange},
      {"r=fixed\x01,s=QUJD,i=1", absl::StatusCode::kInvalidArgument},
      {std::string("r=fixedX\0,s=QUJD,i=1", 20), absl::StatusCode::kInvalidArgument},
      {"r=fixedX,s=QUJD,i=1,x=y", absl::StatusCode::kOk},  // optional extension ignored
      {"r=fixedX,s=QUJD,i=3", absl::StatusCode::kOk},
  }));
  CAPTURE(server_first);
  ScramClient c = MakeClient({.password = "p", .client_nonce = "fixed"});
  CHECK(c.HandleServerFirst(server_first).status().code() == code);
}

TEST_CASE("Iteration bound from the server is configurable and inclusive") {
  ScramLimits limits;
  limits.max_iterations = 16;
  ScramClient ok = MakeClient({.password = "p", .client_nonce = "n", .limits = limits});
  CHECK(ok.HandleServerFirst("r=nX,s=QUJD,i=16").ok());
  ScramClient too_many = MakeClient({.password = "p", .client_nonce = "n", .limits = limits});
  CHECK(too_many.HandleServerFirst("r=nX,s=QUJD,i=17").status().code() == absl::StatusCode::kOutOfRange);
  ScramClient one = MakeClient({.password = "p", .client_nonce = "n", .limits = limits});
  CHECK(one.HandleServerFirst("r=nX,s=QUJD,i=1").ok());
}

TEST_CASE("Malformed server-final is rejected with the specific error") {
  auto [server_final, code] = GENERATE(table<std::string, absl::StatusCode>({
      {"", absl::StatusCode::kInvalidArgument},
      {"e=invalid-proof", absl::StatusCode::kUnauthenticated},
      {"v=", absl::StatusCode::kInvalidArgument},
      {"v=AAAA", absl::StatusCode::kInvalidArgument},
      {"v=not base64", absl::StatusCode::kInvalidArgument},
      {"x=abc", absl::StatusCode::kInvalidArgument},
      {"m=abc", absl::StatusCode::kUnimplemented},
      {"garbage", absl::StatusCode::kInvalidArgument},
      {"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", absl::StatusCode::kUnauthenticated},
      {"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=,junk", absl::StatusCode::kInvalidArgument},
  }));
  CAPTURE(server_final);
  ScramClient c = MakeClient({.password = "p", .client_nonce = "n"});
  REQUIRE(c.HandleServerFirst("r=nX,s=QUJD,i=1").ok());
  CHECK(c.HandleServerFinal(server_final).code() == code);
  CHECK(c.state() == ScramClient::State::kFailed);
}

TEST_CASE("-PLUS with a different certificate hash fails the channel-binding check") {
  ScramClient c = MakeClient({.password = "secret", .binding = ChannelBinding::kTlsServerEndPoint, .cert_hash = "A"});
  ScramServer s = MakeServer({.verifier = CheapVerifier(), .cert_hash = "B"});
  auto server_first = s.HandleClientFirst(c.mechanism(), c.ClientFirstMessage());
  REQUIRE(server_first.ok());
  auto client_final = c.HandleServerFirst(*server_first);
  REQUIRE(client_final.ok());
  CHECK(s.HandleClientFinal(*client_final).status().code() == absl::StatusCode::kPermissionDenied);
}

TEST_CASE("Methods called out of order fail with FailedPrecondition") {
  ScramClient c = MakeClient({.password = "p"});
  CHECK(c.HandleServerFinal("v=x").code() == absl::StatusCode::kFailedPrecondition);
  CHECK(c.HandleServerFirst("r=x,s=QUJD,i=1").status().code() == absl::StatusCode::kFailedPrecondition);
  ScramServer s = MakeServer({.verifier = CheapVerifier()});
  CHECK(s.HandleClientFinal("c=biws,r=x,p=x").status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("Create validates options") {
  CHECK(ScramClient::Create({.password = "p", .binding = ChannelBinding::kTlsServerEndPoint}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ScramClient::Create({.password = "p", .client_nonce = "a,b"}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ScramServer::Create({}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ScramServer::Create({.verifier = CheapVerifier(), .server_nonce = "a b"}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(MakeScramVerifier("p", "", 1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MakeScramVerifier("p", "s", 0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("MakeScramVerifier with defaults uses a fresh salt") {
  auto a = MakeScramVerifier("pw");
  auto b = MakeScramVerifier("pw");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->iterations == kDefaultScramIterations);
  CHECK(a->salt.size() == kDefaultScramSaltSize);
  CHECK(a->salt != b->salt);
  CHECK(VerifyScramPassword(*a, "pw"));
}

TEST_CASE("SASLprep is applied to the password (non-ASCII space)") {
  // "pass<U+00A0>word" and "pass word" must yield the same verifier.
  auto a = MakeScramVerifier("pass\xC2\xA0word", "salt", 1);
  auto b = MakeScramVerifier("pass word", "salt", 1);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->stored_key == b->stored_key);
}

TEST_CASE("ChooseScramMechanism") {
  using P = ChannelBindingPolicy;
  struct Case {
    std::vector<std::string_view> offered;
    bool have_hash;
    P policy;
    absl::StatusCode code;
    std::string_view mechanism;
    ChannelBinding binding;
  };
  auto c = GENERATE(values<Case>({
      {{kScramSha256Plus, kScramSha256}, true, P::kPrefer, absl::StatusCode::kOk, kScramSha256Plus,
       ChannelBinding::kTlsServerEndPoint},
      {{kScramSha256Plus, kScramSha256}, false, P::kPrefer, absl::StatusCode::kOk, kScramSha256, ChannelBinding::kNone},
      {{kScramSha256}, true, P::kPrefer, absl::StatusCode::kOk, kScramSha256, ChannelBinding::kClientSupported},
      {{kScramSha256}, false, P::kPrefer, absl::StatusCode::kOk, kScramSha256, ChannelBinding::kNone},
      {{kScramSha256Plus, kScramSha256}, true, P::kDisable, absl::StatusCode::kOk, kScramSha256,
       ChannelBinding::kNone},
      {{kScramSha256}, true, P::kRequire, absl::StatusCode::kPermissionDenied, "", ChannelBinding::kNone},
      {{kScramSha256Plus, kScramSha256}, false, P::kRequire, absl::StatusCode::kPermissionDenied, "",
       ChannelBinding::kNone},
      {{kScramSha256Plus}, false, P::kPrefer, absl::StatusCode::kPermissionDenied, "", ChannelBinding::kNone},
      {{"SCRAM-SHA-1", "OAUTHBEARER"}, true, P::kPrefer, absl::StatusCode::kInvalidArgument, "",
       ChannelBinding::kNone},
      {{}, true, P::kPrefer, absl::StatusCode::kInvalidArgument, "", ChannelBinding::kNone},
  }));
  auto r = ChooseScramMechanism(absl::MakeConstSpan(c.offered), c.have_hash, c.policy);
  REQUIRE(r.status().code() == c.code);
  if (r.ok()) {
    CHECK(r->mechanism == c.mechanism);
    CHECK(r->binding == c.binding);
  }
  // The std::string overload agrees.
  std::vector<std::string> owned(c.offered.begin(), c.offered.end());
  CHECK(ChooseScramMechanism(absl::MakeConstSpan(owned), c.have_hash, c.policy).status().code() == c.code);
}

}  // namespace
}  // namespace hyperpool::auth
