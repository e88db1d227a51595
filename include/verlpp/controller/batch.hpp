// The controller's name for data::Batch (verl's DataProto), which lives in the data layer so
// that the trainers below the controller can take it. Code inside verlpp::controller says
// `Batch`; code elsewhere names verlpp::data::Batch, and this alias keeps code written against
// verlpp::controller::Batch compiling.
#pragma once

#include <verlpp/data/batch.hpp>

namespace verlpp::controller {

using data::Batch;

}  // namespace verlpp::controller
