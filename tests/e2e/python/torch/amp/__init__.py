from .grad_scaler import GradScaler
