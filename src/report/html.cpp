// See html.h.
#include "report/html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace headcount::report {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string ramp(double t, int r, int g, int b) {
  t = std::clamp(t, 0.0, 1.0);
  auto mix = [&](int c) { return static_cast<int>(std::lround(255 - t * (255 - c))); };
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", mix(r), mix(g), mix(b));
  return buffer;
}

const char* series_colour(int i) {
  static const char* const kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kColours[((i % 10) + 10) % 10];
}

std::string page(const std::string& title, const std::string& css, const std::string& body) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
         escape(title) +
         "</title>\n<style>\n"
         "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}\n"
         "h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse}\n"
         "td,th{padding:2px 8px;border-bottom:1px solid "
         "#eee;text-align:right}th{background:#f6f6f6}\n"
         "td:first-child,th:first-child{text-align:left}code,pre{font-size:12px}\n"
         "svg text{font:11px system-ui,sans-serif}.flex{display:flex;flex-wrap:wrap;gap:18px}\n" +
         css + "</style></head>\n<body>\n" + body + "\n</body></html>\n";
}

}  // namespace headcount::report
