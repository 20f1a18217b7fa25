#include "engine/request.h"

#include <utility>

namespace relax {

void finish_request(HandleTable& handles, const LocalRequest& request, int32_t status, const std::string& message,
                    int64_t result, std::vector<int64_t> received_splits) {
  handles.complete(request.handle, status, message, result, std::move(received_splits));
  if (request.done) request.done(request.user, request.handle, status, message.c_str());
}

}  // namespace relax
