// Runs a parsed template (jinja_ast.h) with jinja2's scoping: `{% for %}` iterations, macros,
// `{% with %}` and block bodies get their own scope (assignments inside do not leak out, hence
// namespace()); `{% if %}` does not.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dspark/io/jinja_ast.h"
#include "dspark/io/jinja_builtins.h"

namespace dspark::jinja {

// Renders `t` with `variables` as the template context. Throws dspark::Error: invalid_input with
// exactly the message for raise_exception(message); other errors the template causes at run time
// (undefined values misused, type errors) keep their kind with "chat template line N: " prefixed;
// unsupported for Python/Jinja features we do not implement.
std::string render(const Template& t, const std::vector<std::pair<std::string, Value>>& variables,
                   const GlobalOptions& options);

// Whether the template loops over a message's content (`{% for x in message['content'] %}` or
// `message.content`), i.e. renders OpenAI-style lists of content parts itself.
bool iterates_over_content(const Template& t);

}  // namespace dspark::jinja
