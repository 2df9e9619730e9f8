#pragma once
// How the tests of tests/header name the sentence of lumen.h that each proves. The macros'
// arguments are read by check_header_claims.py, which fails when a claim of the header (a
// sentence naming a status, a bound or a guarantee: see CLAIM_WORDS there) is accounted for
// by none of them, or when one quotes a sentence the header no longer has. Quote the sentence
// as lumen.h writes it (line breaks become single spaces); `subject` is the declaration its
// comment documents, or the title of the header's opening part ("Conventions", "GPU
// engines"): check_header_claims.py --list prints every claim with its subject.

#include <catch2/catch.hpp>

// Inside the TEST_CASE that proves the claim: a failure in it prints the sentence.
#define LUMEN_CLAIM(subject, sentence) INFO("lumen.h, " subject ": " sentence)

// At namespace scope: the claim (or a part of it) is proven by TEST_CASE `test_name` of
// `test_file` (a GPU suite, or a test too long to run twice); the checker checks it exists.
#define LUMEN_CLAIM_PROVEN_ELSEWHERE(subject, sentence, test_file, test_name) \
  static_assert(sizeof(test_file) > 1 && sizeof(test_name) > 1, subject)

// At namespace scope: no test proves the claim (or a part of it), and `reason` says why.
#define LUMEN_CLAIM_UNPROVEN(subject, sentence, reason) \
  static_assert(sizeof(reason) > 10, "a claim left unproven needs its reason: " subject)
