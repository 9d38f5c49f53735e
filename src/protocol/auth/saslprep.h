// SASLprep (RFC 4013) of passwords, the way PostgreSQL applies it before
// SCRAM: if the password is not valid SASLprep input, PostgreSQL uses the raw
// bytes instead of failing, so this function never fails either.
#ifndef HYPERPOOL_PROTOCOL_AUTH_SASLPREP_H_
#define HYPERPOOL_PROTOCOL_AUTH_SASLPREP_H_

#include <string>
#include <string_view>

namespace hyperpool::auth {

// Returns the password PostgreSQL would feed to SCRAM's Hi() for `password`
// (the result of src/common/saslprep.c pg_saslprep, or the raw bytes when
// that reports the input invalid):
//   - pure ASCII (any byte < 0x80, control characters included): unchanged,
//     exactly as PostgreSQL's ASCII fast path;
//   - invalid UTF-8: raw bytes;
//   - otherwise step 1 (map non-ASCII spaces to ' ', drop "commonly mapped to
//     nothing" characters) is applied; an empty result or an ASCII control
//     character then means "prohibited" -> raw bytes;
//   - if every remaining character is printable ASCII or lies in a
//     conservative set of ranges known to be NFKC-stable, assigned in
//     Unicode 3.2, not prohibited and not right-to-left (Latin-1 and
//     Latin Extended-A letters, basic Greek and Cyrillic, kana, Hangul
//     syllables, CJK unified ideographs), the mapped string is returned.
// LIMITATION: full NFKC normalisation, the complete prohibition tables and
// the bidi rule are not implemented. A password with a character outside
// those ranges (for example decomposed accents, full-width forms, Arabic or
// Hebrew) is returned raw, which differs from PostgreSQL when PostgreSQL
// would have normalised it. Such passwords fail SCRAM against a verifier
// PostgreSQL computed; MD5 and cleartext are unaffected.
std::string SaslPrep(std::string_view password);

}  // namespace hyperpool::auth

#endif  // HYPERPOOL_PROTOCOL_AUTH_SASLPREP_H_
