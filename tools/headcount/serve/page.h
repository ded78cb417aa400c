// GET / of `headcount serve`: one self-contained HTML page (no file, no CDN, no framework) to try
// the served models in a browser: a chat with the decoder, streamed token by token from
// /v1/chat/completions, and the cosine similarity of two sentences from /v1/embeddings. It reads
// GET /v1/models to know which panels it can show, sends the API key typed into it (kept in the
// tab only), and with ?demo=1 runs one chat turn and one comparison by itself, so the browser test
// (tests/python/test_serve_page.py) can check what it rendered.
#pragma once

#include <string>

namespace headcount::serve {

const std::string& index_page();

}  // namespace headcount::serve
