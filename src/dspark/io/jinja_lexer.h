// Tokenizer of the Jinja2 subset used by chat templates, with the whitespace rules of the
// environment transformers renders chat templates in: trim_blocks=True (the first newline after a
// block or comment tag is removed), lstrip_blocks=True (spaces and tabs before a block or comment
// tag at the start of a line are removed), keep_trailing_newline=False (one trailing newline of
// the template is dropped), `{%-`/`-%}` (and the same on `{{`, `{#`) strip all whitespace on that
// side, `{%+`/`+%}` disable lstrip/trim for that tag. \r\n and \r become \n. {% raw %} blocks
// come out as plain text. Syntax errors throw ErrorKind::io naming the line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dspark::jinja {

enum class TokenType {
  data,         // template text to output as-is
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,
  string,  // text: the decoded value of the literal
  integer,
  floating,
  op,  // text: the operator, e.g. "==", "(", "|"
  eof,
};

struct Token {
  TokenType type = TokenType::eof;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

std::vector<Token> tokenize(std::string_view source);

}  // namespace dspark::jinja
