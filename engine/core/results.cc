#include "engine/core/results.h"

#include <algorithm>
#include <sstream>

namespace gpupack::api {

std::string PageToken(size_t end) {
  std::ostringstream token;
  token << "gp1." << std::hex << end;
  return token.str();
}

ListPage PageOf(const char* key, std::vector<std::string> items, size_t begin, size_t limit) {
  ListPage page;
  page.key = key;
  begin = std::min(begin, items.size());
  const size_t end = std::min(items.size(), begin + limit);
  if (end < items.size()) page.next_token = PageToken(end);
  items.erase(items.begin() + static_cast<std::ptrdiff_t>(end), items.end());
  items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(begin));
  page.items = std::move(items);
  return page;
}

}  // namespace gpupack::api
