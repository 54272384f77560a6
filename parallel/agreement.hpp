#pragma once
// Agreeing on a failure across a group: when something that may fail on some processes only
// (allocating a trial's model, opening its data) has just been tried by every process, each calls
// first_error with its own error text ("" when it succeeded). Every process gets the same answer,
// so all of them go on together or all stop together instead of some waiting forever in the
// next collective for processes that have left.
#include "parallel/communicator.hpp"

#include <string>

namespace joule::parallel {

// "" when every process of `comm` passed ""; otherwise "rank R: TEXT" for the lowest rank R that
// passed a non-empty TEXT, plus how many processes failed when more than one did. Collective.
std::string first_error(Communicator& comm, std::string const& mine);

}  // namespace joule::parallel
