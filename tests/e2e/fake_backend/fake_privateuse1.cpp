// A stand-in for a vendor's torch extension, preloaded into `verlpp train` by the device test:
// it registers a device guard for PrivateUse1 (what makes LibTorch count the backend as
// registered) and nothing else, so the run picks the plugin's privateuseone device and its first
// tensor placed there fails inside LibTorch, which shows that no CPU stood in for the device.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

C10_REGISTER_GUARD_IMPL(PrivateUse1, c10::impl::FakeGuardImpl<c10::DeviceType::PrivateUse1>);
