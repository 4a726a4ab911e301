#include "dspark/server/chat_prompt.h"

#include <memory>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/engine/model_chat_template.h"
#include "dspark/io/chat_template.h"
#include "dspark/server/errors.h"

namespace dspark::server {

ChatPrompt load_chat_prompt(const std::filesystem::path& model_dir) {
  ChatPrompt p;
  std::shared_ptr<const ChatTemplate> tmpl;
  try {
    // A ChatTemplate is immutable after loading and renders concurrently.
    tmpl = std::make_shared<const ChatTemplate>(load_model_chat_template(model_dir));
  } catch (const Error& e) {
    // Completions still work; chat requests report why they cannot.
    const std::string why = e.what();
    p.render = [why](const nlohmann::ordered_json&, const nlohmann::ordered_json&) -> std::string {
      throw ApiError(500, "server_error", "The model's chat template could not be loaded: " + why,
                     {}, "chat_template_error", "chat_template");
    };
    p.description = "chat template NOT loaded (" + why + "): chat requests fail";
    p.load_error = why;
    return p;
  }
  if (tmpl->has_template()) {
    p.render = [tmpl](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& extra) {
      return tmpl->render_ordered(messages, /*add_generation_prompt=*/true, extra);
    };
    p.add_special_tokens = false;
    p.description = "chat template from the model directory";
  } else {
    p.render = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json&) {
      return render_plain_chat(nlohmann::json::parse(messages.dump()),
                               /*add_generation_prompt=*/true);
    };
    p.add_special_tokens = true;
    p.description = "no chat template: plain 'role: content' lines";
  }
  return p;
}

}  // namespace dspark::server
