// Small pieces of self-contained HTML shared by every report headcount writes (the heads report,
// the experiment pages): text escaping, fixed-point numbers, colour ramps, and the page shell.
// Nothing here fetches anything: a page is one file that opens offline.
#pragma once

#include <string>

namespace headcount::report {

// Escapes & < > " ' for text and attribute values.
std::string escape(const std::string& text);

// printf("%.*f"): the one way numbers are written into pages, so they read the same everywhere.
std::string fixed(double value, int digits);

// t in [0, 1] (clamped) as a ramp from white to the colour (r, g, b): "#rrggbb".
std::string ramp(double t, int r, int g, int b);

// A categorical colour for series i (Tableau 10), repeating after ten.
const char* series_colour(int i);

// <!doctype html> ... with the title, a common stylesheet plus `css`, and `body`.
std::string page(const std::string& title, const std::string& css, const std::string& body);

}  // namespace headcount::report
