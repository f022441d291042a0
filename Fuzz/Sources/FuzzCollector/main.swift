import FuzzSupport
FuzzMain.run { _ in }
